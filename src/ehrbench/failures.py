"""How a failed model turn ends: per benchmark, role and failure kind, as its authors' code ends it (the fidelity
contract's second rule).

A provider's answer can fail a call in a handful of ways (`KINDS`); the clients report which (`ModelTurnError.kind`,
`InfrastructureError.status` and `.agent_caused`, `ChatResponse.malformed`, `kind_of`), and each benchmark's code ends
the turn as its original does: asks again, goes on with the original's fallback text, judges what there is, scores
it as the agent's failure, or re-runs the trial as infrastructure. Rate limits, server errors, timeouts and dropped
connections are retried by every client, then re-run as infrastructure (the contract's fifth rule), in every role.
Each benchmark declares what it does in a `FailureTable` (`benchmarks/<name>/failures.py`), shown on its docs page.
"""
from __future__ import annotations

from dataclasses import dataclass

from .llm.base import kind_of  # noqa: F401  (re-exported: a benchmark reads a failure's kind here)

# the failure kinds, as the tables name them
KINDS = {
    "empty": "an HTTP 200 with no choices (no candidates)",
    "cut_with_text": "cut off at the output-token limit after some text",
    "cut_off": "cut off before any text",
    "blocked": "blocked by a safety filter",
    "refused_for_size": "refused for the conversation's size (HTTP 413, or a 400 saying so)",
    "bad_request": "any other HTTP 400",
    "malformed": "tool-call arguments that are not a JSON object",
    "text_calls": "tool calls written as text",
    "parallel": "several tool calls in one reply",
}


@dataclass(frozen=True)
class Row:
    roles: tuple[str, ...]
    kinds: tuple[str, ...]
    original: str               # what the authors' code does, and where
    ehrbench: str = ""          # what ehrbench does instead, where it differs (a row of the Differences table)

    def __post_init__(self):
        unknown = set(self.kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown failure kinds {sorted(unknown)}; known: {list(KINDS)}")


@dataclass(frozen=True)
class FailureTable:
    rows: tuple[Row, ...]
    note: str = ""

    def markdown(self) -> str:
        lines = ["| roles | when the reply is | the original (and ehrbench under `contract=original`) |",
                 "| --- | --- | --- |"]
        for r in self.rows:
            what = r.original + (f" **ehrbench:** {r.ehrbench}" if r.ehrbench else "")
            lines.append(f"| {', '.join(r.roles)} | {'; '.join(KINDS[k] for k in r.kinds)} | {what} |")
        return "\n".join(lines) + (f"\n\n{self.note}" if self.note else "")

    def covered(self, roles: tuple[str, ...]) -> dict[str, set[str]]:
        """role -> the kinds the table says something about."""
        out: dict[str, set[str]] = {r: set() for r in roles}
        for row in self.rows:
            for role in row.roles:
                out.setdefault(role, set()).update(row.kinds)
        return out
