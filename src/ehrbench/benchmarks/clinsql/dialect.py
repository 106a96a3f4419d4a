"""BigQuery SQL, as ClinSQL's models and gold queries write it, turned into DuckDB SQL for the local MIMIC-IV copy.

sqlglot reads BigQuery and writes DuckDB; this module adds what it leaves for the caller, each a recorded step:
- tables: `physionet-data.mimiciv_3_1_hosp.patients` (any MIMIC-IV version, with or without the project) is the
  local `mimiciv_hosp.patients` (icu, derived, note and ed likewise);
- `SAFE.` functions (`SAFE.LOG(x)`: NULL instead of an error) become DuckDB's `TRY(...)` (over an aggregate, which
  TRY cannot hold, the function alone);
- `UNNEST([STRUCT(...), ...])` without an alias, whose fields BigQuery exposes as columns, becomes a subquery
  unnesting them recursively (DuckDB's plain UNNEST gives one struct column);
- `FORMAT('%.3f', x)`: BigQuery's printf-style format is DuckDB's `printf`, not its `format` ('{}' style);
- APPROX_QUANTILES(x, n)[OFFSET(k)] becomes APPROX_QUANTILE(x, [0, 1/n, ...])[k + 1] (DuckDB lists count from 1);
  both engines approximate, so results are compared with a tolerance, not exactly.
Two readings BigQuery allows that sqlglot does not: a trailing comment after the last `;` (the original's extractor
appends `;` after it: "SELECT ...; -- done;") is no second statement, and a column named `map` compared with `<`
(`map < 65`; BigQuery has no MAP type) is quoted before parsing. A query sqlglot cannot read is the model's error,
shown to it like an execution error (`TranspileError`), without the terminal colour codes sqlglot marks it with.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

logging.getLogger("sqlglot").setLevel(logging.ERROR)   # "Applying array index offset" on every OFFSET(k)
MIMIC_DATASET = re.compile(r"^mimic_?iv(?:_\d+(?:_\d+)*)?_(hosp|icu|derived|note|ed)$", re.I)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _quote_map_columns(sql: str) -> str:
    """`map` followed by `<` is a column compared, in BigQuery (which has no MAP type): quoted, so sqlglot does not
    read a MAP<...> type there."""
    from sqlglot.tokens import TokenType

    try:
        tokens = sqlglot.Tokenizer(dialect="bigquery").tokenize(sql)
    except sqlglot.errors.SqlglotError:
        return sql
    out, last = [], 0
    for token, following in zip(tokens, tokens[1:]):
        if token.text.lower() == "map" and following.token_type == TokenType.LT:
            out += [sql[last:token.start], f"`{sql[token.start:token.end + 1]}`"]
            last = token.end + 1
    return "".join(out) + sql[last:]


class TranspileError(ValueError):
    """The query is not BigQuery SQL sqlglot can read: the model's error, reported as an execution error is."""


@dataclass
class Transpiled:
    sql: str                                    # DuckDB SQL
    steps: list[str] = field(default_factory=list)   # what was rewritten beyond sqlglot's own transpiling


def _tables(tree: exp.Expression, steps: list[str]) -> None:
    for table in tree.find_all(exp.Table):
        match = MIMIC_DATASET.match(table.args["db"].name) if table.args.get("db") else None
        if match:
            local = f"mimiciv_{match.group(1).lower()}"
            steps.append(f"table {'.'.join(p.name for p in table.parts)} -> {local}.{table.name}")
            table.set("catalog", None)
            table.set("db", exp.to_identifier(local))


def _safe_functions(tree: exp.Expression, steps: list[str]) -> None:
    for node in list(tree.find_all(exp.SafeFunc)):
        if node.this.find(exp.AggFunc):         # DuckDB's TRY cannot hold an aggregate: the function alone
            steps.append(f"SAFE.{node.this.sql_name()} over an aggregate -> {node.this.sql_name()}")
            node.replace(node.this)
            continue
        steps.append(f"SAFE.{node.this.sql_name()} -> TRY")
        node.replace(exp.Anonymous(this="TRY", expressions=[node.this]))


def _struct_unnest(tree: exp.Expression, steps: list[str]) -> None:
    """`FROM t, UNNEST([STRUCT(...), ...])` without an alias exposes the structs' fields as columns in BigQuery;
    DuckDB's UNNEST gives one struct column, so it becomes `(SELECT UNNEST([...], recursive := true))`."""
    for node in list(tree.find_all(exp.Unnest)):
        items = node.expressions[0] if len(node.expressions) == 1 else None
        if node.args.get("alias") or not isinstance(node.parent, (exp.From, exp.Join)) or not (
                isinstance(items, exp.Array) and items.expressions
                and all(isinstance(e, exp.Struct) for e in items.expressions)):
            continue
        expanded = sqlglot.parse_one("SELECT UNNEST(x, recursive := TRUE)", read="duckdb")
        expanded.expressions[0].set("this", items.copy())
        steps.append("UNNEST of STRUCTs without an alias -> (SELECT UNNEST(..., recursive := true))")
        node.replace(exp.Subquery(this=expanded))


def _printf_formats(tree: exp.Expression, steps: list[str]) -> None:
    for node in list(tree.find_all(exp.Format)):
        if isinstance(node.this, exp.Literal) and "%" in node.this.name:
            steps.append("FORMAT('%...') -> printf")
            node.replace(exp.Anonymous(this="printf", expressions=[node.this, *node.expressions]))


def bigquery_to_duckdb(sql: str) -> Transpiled:
    """DuckDB SQL for one BigQuery statement, and the steps taken."""
    try:
        trees = sqlglot.parse(_quote_map_columns(sql), read="bigquery")
    except sqlglot.errors.SqlglotError as e:      # ParseError, TokenError (an unterminated 'string), ...
        raise TranspileError(f"the query could not be read as BigQuery SQL: {ANSI.sub('', str(e))}") from None
    trees = [t for t in trees if t is not None and not isinstance(t, exp.Semicolon)]   # "; -- comment;"
    if len(trees) != 1:
        raise TranspileError("You can only execute one statement at a time.")
    steps: list[str] = []
    tree = trees[0]
    _tables(tree, steps)
    _safe_functions(tree, steps)
    _struct_unnest(tree, steps)
    _printf_formats(tree, steps)
    try:
        return Transpiled(tree.sql(dialect="duckdb"), steps)
    except sqlglot.errors.SqlglotError as e:
        raise TranspileError(f"the query could not be written as DuckDB SQL: {ANSI.sub('', str(e))}") from None
