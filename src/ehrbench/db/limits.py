"""What any database engine must bound when it runs agent SQL, written once for every engine.

A read-only guard stops writes, a deadline stops runaway joins, and these limits stop the rest: one giant value
(`printf('%.*c', 400000000, 'x')`), a result whose kept rows are huge, and a count that never ends. Each engine
enforces `max_value_bytes` inside the engine where it can (SQLite's length limit), and `fetch_bounded` enforces
the rest on the rows that reach Python, one row at a time, so no query can make the host hold more than
`max_result_bytes` of its result. Every error message is written for the agent and names the limit it hit.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Callable


class QueryError(Exception):
    """Agent SQL that was refused, failed, or ran past a limit. The message is shown to the agent.

    `retryable` is False for every failure that running the same query again cannot fix (all of them so far:
    refusals, syntax errors, time and size limits); hosts never re-send such a query.
    """
    retryable = False


class QueryTimeout(QueryError):
    """A query stopped at its time limit."""


class MemoryLimitError(QueryError):
    """A query that needed more memory than its engine may use (the engine process may be left unhealthy)."""


@dataclass
class QueryResult:
    rows: list[tuple]
    total: int          # rows the query produced (counted up to `count_cap`)
    capped: bool        # True when counting stopped at the cap
    columns: tuple[str, ...] = ()   # the result's column names (a result table's header, as ClinSQL saves it)


@dataclass(frozen=True)
class QueryLimits:
    max_value_bytes: int = 1_000_000       # one string or blob (longer ones fail, or become NULL in printf)
    max_result_bytes: int = 4_000_000      # the rows kept for the answer, all values together
    max_columns: int = 200                 # columns of one result row
    max_heap_bytes: int = 2_000_000_000    # the SQL engine's own memory (SQLite: hard_heap_limit, process-wide)

    def __post_init__(self):
        for name in ("max_value_bytes", "max_result_bytes", "max_columns", "max_heap_bytes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")


def value_bytes(value) -> int:
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return len(value)
    return 8


def fetch_bounded(cursor, keep: int, count_cap: int, limits: QueryLimits,
                  sort_key: Callable[[tuple], Any] | None = None) -> QueryResult:
    """Keep the first `keep` rows (at most `max_result_bytes` of values), count the rest up to `count_cap`.

    With `sort_key`, keep instead the `keep` smallest rows under that key, in order (a scorer that compares "the
    first 100 rows after sorting" needs them without holding the whole result). Rows past `keep` are read one at
    a time and dropped, so counting a long result costs time, never memory.
    """
    rows: list[tuple] = []
    heap: list = []
    kept_bytes = 0
    total = 0
    while total < count_cap:
        row = cursor.fetchone()
        if row is None:
            break
        total += 1
        if sort_key is not None:
            _check_value_sizes(row, limits)
            item = (_Desc(sort_key(row)), total, tuple(row))
            if len(heap) < keep:
                heapq.heappush(heap, item)
            elif item[0] > heap[0][0]:
                heapq.heapreplace(heap, item)
            continue
        if len(rows) < keep:
            kept_bytes += sum(_check_value_sizes(row, limits))
            if kept_bytes > limits.max_result_bytes:
                raise QueryError(f"query stopped: the first {len(rows) + 1} rows of the result are larger than the "
                                 f"{limits.max_result_bytes:,}-byte limit on a result; select fewer or shorter columns, "
                                 "or fewer rows (LIMIT)")
            rows.append(tuple(row))
    if sort_key is not None:
        rows = [row for _, _, row in sorted(heap, key=lambda item: (item[0].key, item[1]))]
        if sum(value_bytes(v) for row in rows for v in row) > limits.max_result_bytes:
            raise QueryError(f"query stopped: the {len(rows)} rows kept are larger than the "
                             f"{limits.max_result_bytes:,}-byte limit on a result")
    columns = tuple(d[0] for d in cursor.description or ())
    return QueryResult(rows=rows, total=total, capped=total >= count_cap, columns=columns)


def _check_value_sizes(row, limits: QueryLimits) -> list[int]:
    sizes = [value_bytes(v) for v in row]
    if max(sizes, default=0) > limits.max_value_bytes:
        raise QueryError(f"query stopped: a value in the result is larger than the "
                         f"{limits.max_value_bytes:,}-byte limit on one value; select a shorter part (substr)")
    return sizes


class _Desc:
    """A key with its order reversed, so a min-heap keeps the largest of the smallest rows on top."""
    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __lt__(self, other: "_Desc") -> bool:
        return other.key < self.key

    def __gt__(self, other: "_Desc") -> bool:
        return self.key < other.key

    def __eq__(self, other) -> bool:
        return self.key == other.key


def cap_observation(text: str, max_chars: int) -> str:
    """A tool observation cut to `max_chars`, saying so (the agent's context is not the place for megabytes)."""
    if len(text) <= max_chars:
        return text
    return (text[:max_chars] + f"\n\n[observation cut at the {max_chars:,}-character limit; "
            f"{len(text) - max_chars:,} characters not shown. Ask for fewer rows or columns.]")
