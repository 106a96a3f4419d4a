"""A table as the agent's `column_search` shows it: a CREATE TABLE text and three sample rows.

The layout is the EHR-ChatQA authors' (src/envs/<db>/tools/column_search.py, built from PRAGMA table_info,
foreign_key_list and index_list): one tab-indented line per column, then PRIMARY KEY, one FOREIGN KEY line per
column pair, UNIQUE lines, and a /* ... */ block headed "3 rows from <table> table:" with tab-separated values.
Both engines render through this one function.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TableShape:
    name: str
    columns: list[tuple[str, str, bool]]                    # name, declared type, NOT NULL
    primary_key: list[str] = field(default_factory=list)
    foreign_keys: list[tuple[str, str, str]] = field(default_factory=list)   # column, referenced table, column
    unique: list[str] = field(default_factory=list)


def display_type(declared: str) -> str:
    """As EHR-ChatQA's `column_search` prints a declared type: upper-cased, every INT spelt INTEGER (its schemas
    declare INT, as ours do now), so a file of your own that declares INTEGER prints INTEGEREGER and BIGINT
    BIGINTEGER, there as here."""
    kind = (declared or "").upper().replace("INT", "INTEGER")
    return "TIMESTAMP" if "TIMESTAMP" in kind else kind


def create_table_text(shape: TableShape, sample_rows: list[tuple]) -> str:
    lines = [f"\n\t{name} {display_type(kind)} {'NOT NULL' if not_null else ''}".rstrip()
             for name, kind, not_null in shape.columns]
    text = f"CREATE TABLE {shape.name} (" + ",".join(lines)
    if shape.primary_key:
        text += f",\n\tPRIMARY KEY ({', '.join(shape.primary_key)})"
    for column, table, target in shape.foreign_keys:
        text += f",\n\tFOREIGN KEY ({column}) REFERENCES {table} ({target})"
    for column in shape.unique:
        text += f",\n\tUNIQUE ({column})"
    text = text.rstrip(",\n") + "\n)"
    header = "\t".join(name for name, _, _ in shape.columns)
    body = "\n".join("\t".join(map(str, row)) for row in sample_rows)
    return text + f"\n/*\n3 rows from {shape.name} table:\n{header}\n{body}\n*/"
