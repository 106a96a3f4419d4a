"""A harness-served tool for bench_sandbox.py's cells."""


def bind(call, context):
    return {"SQLInterpreter": lambda sql: call("sql", sql)}
