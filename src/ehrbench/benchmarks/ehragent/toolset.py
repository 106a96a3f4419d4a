"""EHRAgent's code interface, bound into every sandboxed cell: LoadDB, FilterDB, GetValue, SQLInterpreter, Calendar,
Calculate (wshi83/EhrAgent, tools/tabtools.py and tools/calculator.py).

This module runs inside the sandbox child (`agents/sandbox_host.py` imports it and calls `bind`). LoadDB and
SQLInterpreter ask the harness, which runs them on the hosted, read-only database; FilterDB and GetValue work on the
loaded pandas frame here, with the original's semantics, messages and quirks (conditions split on "||" and not
stripped, operators tried in the order >=, <=, >, <, =, in, max, min, values coerced to the type of the column's
first value, quotes stripped only for < and =, an `=` that matches nothing listing the five closest values by
Levenshtein distance, a failing condition that names a real column silently ignored). LoadDB's frame is read by
pandas from CSV text, as the original read EHRSQL's CSV files: a NULL is NaN, a code that looks like a number
(ICD-9 "4019") becomes one, so FilterDB, GetValue and the errors they raise see the types the original saw. Every
cell starts with `answer = 0`, as the original's run_code. Two changes, both for
reproducibility: ties among the closest values and GetValue's de-duplicated values come in a fixed order (the
original's came in hash order, different per process), and Calendar counts from the database's "now" (the original
used SQLite's `current_time`, a time of day, so its dates fell in the year 2000). Calculate is a local arithmetic
evaluator in place of the original's WolframAlpha API, with the original's error message.
"""
from __future__ import annotations

import ast
import io
import math
import operator
import sqlite3

import Levenshtein
import pandas as pd

CALCULATOR_ERROR = ("Invalid input query for Calculator. Please check the input query or use other functions to do "
                    "the computation.")


def bind(call, context: dict) -> dict:
    """The six tools, `call` reaching the harness for the database ones; context: {"tables": [...], "now": "..."}."""
    tables = set(context.get("tables") or [])
    now = context.get("now") or "2105-12-31 23:59:00"

    def LoadDB(target_ehr):
        if target_ehr not in tables:
            raise KeyError(target_ehr)
        return pd.read_csv(io.StringIO(call("load", target_ehr)))

    def SQLInterpreter(command):
        return [tuple(row) for row in call("sql", command)]

    def Calendar(argument):
        return date_calculator(argument, now)

    # named as the original's functions (tabtools.py), so a wrong call's TypeError reads as there ("db_loader()
    # missing 1 required positional argument: 'target_ehr'"), which run_code then renames to the tool's name
    for function, internal in ((LoadDB, "db_loader"), (SQLInterpreter, "sql_interpreter"),
                               (Calendar, "date_calculator")):
        function.__name__ = function.__qualname__ = internal
    return {"answer": 0, "LoadDB": LoadDB, "FilterDB": data_filter, "GetValue": get_value, "SQLInterpreter": SQLInterpreter,
            "Calendar": Calendar, "Calculate": calculate}


def _coerce(value, data: pd.DataFrame, column: str, by_label: bool = True):
    """`value` as the type of the column's first value, as the original finds it: the row labelled 0 of the frame
    (gone once an earlier condition dropped it: the value then stays a string) or, for `=`, the first row."""
    try:
        sample = data[column][0] if by_label else data[column].tolist()[0]
        return type(sample)(value)
    except Exception:  # noqa: BLE001
        return value


def data_filter(data: pd.DataFrame, argument: str) -> pd.DataFrame:
    """FilterDB: `COL=value||COL<value||COL in [a, b]||max(COL)`, applied one after another."""
    backup_data = data
    commands = argument.split("||")
    for i in range(len(commands)):
        command = commands[i]
        column_name, value = "", ""
        try:
            if ">=" in command:
                column_name, value = command.split(">=")[0], command.split(">=")[1]
                data = data[data[column_name] >= _coerce(value, data, column_name)]
            elif "<=" in command:
                column_name, value = command.split("<=")[0], command.split("<=")[1]
                data = data[data[column_name] <= _coerce(value, data, column_name)]
            elif ">" in command:
                column_name, value = command.split(">")[0], command.split(">")[1]
                data = data[data[column_name] > _coerce(value, data, column_name)]
            elif "<" in command:
                column_name, value = command.split("<")[0], command.split("<")[1]
                if value[:1] in ("'", '"'):
                    value = value[1:-1]
                data = data[data[column_name] < _coerce(value, data, column_name)]
            elif "=" in command:
                column_name, value = command.split("=")[0], command.split("=")[1]
                if value[:1] in ("'", '"'):
                    value = value[1:-1]
                value = _coerce(value, backup_data, column_name, by_label=False)
                data = data[data[column_name] == value]
            elif " in " in command:
                column_name, value = command.split(" in ")[0], command.split(" in ")[1]
                items = [v.strip().strip("'").strip('"') for v in value.strip("[]").split(",")]
                kind = type(data[column_name][0])    # no fallback: where this fails the condition is ignored
                data = data[data[column_name].isin(list(map(kind, items)))]
            elif "max" in command:
                column_name = command.split("max(")[1].split(")")[0]
                data = data[data[column_name] == data[column_name].max()]
            elif "min" in command:
                column_name = command.split("min(")[1].split(")")[0]
                data = data[data[column_name] == data[column_name].min()]
        except Exception:  # noqa: BLE001 - as the original: a bad column or syntax is reported, anything else ignored
            if column_name not in data.columns.tolist():
                columns = ", ".join(data.columns.tolist())
                raise Exception(f"The filtering query {command} is incorrect. Please modify the column name or use "
                                f"LoadDB to read another table. The column names in the current DB are {columns}.")
            if column_name == "" or value == "":
                raise Exception(f"The filtering query {command} is incorrect. There is syntax error in the command. "
                                "Please modify the condition or use LoadDB to read another table.")
        if len(data) == 0:
            column_values = list(dict.fromkeys(backup_data[column_name].tolist())) if column_name in backup_data else []
            if "=" in command and value not in column_values and ">=" not in command and "<=" not in command:
                ranked = sorted(column_values, key=lambda cv: (Levenshtein.distance(str(cv), str(value)), str(cv)))
                examples = ", ".join(str(v) for v in ranked[:5])
                raise Exception(f"The filtering query {command} is incorrect. There is no {value} value in the column. "
                                f"Five example values in the column are {examples}. Please check if you get the "
                                f"correct {column_name} value.")
            return data
    return data


def get_value(data: pd.DataFrame, argument: str):
    """GetValue: `COL` (its values, joined by ", ", each once) or `COL, op` with op mean, max, min, sum or list."""
    column = argument
    try:
        commands = argument.split(", ")
        if len(commands) == 1:
            column = argument.lstrip("['").rstrip("']")
            if len(data) == 1:
                return str(data.iloc[0][column])
            return ", ".join(str(v) for v in dict.fromkeys(data[column].tolist()))
        column, op = commands[0], commands[-1]
        values = data[column].tolist()
        if "mean" in op:
            return sum(float(v) for v in values) / len(values)
        if "max" in op or "min" in op:
            pick = max if "max" in op else min
            try:
                values = [float(v) for v in values]
            except Exception:  # noqa: BLE001 - the original's bare except
                values = [str(v) for v in values]
            return pick(values)
        if "sum" in op:
            return sum(float(v) for v in values)
        if "list" in op:
            return [str(v) for v in values]
        raise Exception(f"The operation {op} contains syntax errors. Please check the arguments.")
    except Exception:  # noqa: BLE001 - the original reports every failure as a column-name error
        raise Exception(f"The column name {column} is incorrect. Please check the column name and make necessary "
                        f"changes. The columns in this table include {', '.join(data.columns.tolist())}.")


def date_calculator(argument: str, now: str):
    """Calendar: SQLite's datetime() of the database's now shifted by `argument` ('-1 year', '+3 day'); None for a
    modifier SQLite does not know, as the original."""
    try:
        return sqlite3.connect(":memory:").execute("select datetime(?, ?)", (now, argument)).fetchone()[0]
    except Exception:  # noqa: BLE001
        raise Exception(f"The date calculator {argument} is incorrect. Please check the syntax and make necessary "
                        "changes. For the current date and time, please call Calendar('0 year').")


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
              ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCTIONS = {"sqrt": math.sqrt, "log": math.log, "log10": math.log10, "exp": math.exp, "abs": abs, "round": round,
              "min": min, "max": max, "floor": math.floor, "ceil": math.ceil}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def calculate(query) -> str:
    """Calculate: an arithmetic formula ("(1.2 + 3) * 4", "sqrt(16)", "2^10"), answered as text like WolframAlpha."""
    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 1000:
                raise ValueError("exponent too large")
            return _OPERATORS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
            return _FUNCTIONS[node.func.id](*(ev(a) for a in node.args))
        if isinstance(node, ast.Name) and node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ValueError("not arithmetic")

    try:
        result = ev(ast.parse(str(query).replace("^", "**"), mode="eval").body)
        return str(round(result, 6)) if isinstance(result, float) else str(result)
    except Exception:  # noqa: BLE001 - also a number too long to write out
        raise Exception(CALCULATOR_ERROR) from None
