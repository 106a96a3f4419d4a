"""Tools bound into sandboxed cells by tests/test_code_sandbox.py: one served by the harness, one local."""


def bind(call, context):
    return {"SQLInterpreter": lambda sql: call("sql", sql), "NOW": context.get("now")}
