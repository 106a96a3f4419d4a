"""What a run will cost before it is spent: calls, tokens and dollars per model and role.

trials to run (tasks x trials) x calls per trial x tokens per call x the model's price. Calls and tokens per trial
come from the benchmark's profile (`data/cost_profile.yaml`, figures from each protocol and its prompt sizes),
replaced, role by role, by what your latest finished run of the same benchmark, agent and model measured (its usage
metrics per scored trial, rejected and failed attempts included). `dry_run=true` prints the estimate and stops.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from .llm.base import Usage
from .llm.usage import Price

PROFILE = Path(__file__).with_name("data") / "cost_profile.yaml"
ROLE_MODEL = {"agent": "agent_model", "user": "user_model", "verifier": "user_model", "reflection": "user_model",
              "validator": "validator_model", "grader": "grader_model"}


@dataclass(frozen=True)
class Line:
    model: str
    role: str
    calls: float
    input_tokens: float
    output_tokens: float
    cost_usd: float
    source: str              # "profile" or the run it was measured in


@functools.lru_cache(maxsize=1)
def profile() -> dict:
    return yaml.safe_load(PROFILE.read_text())


def measured(client, experiment: str, agent: str, model: str) -> tuple[dict[str, dict], str] | None:
    """Per role, calls and tokens per scored trial in the latest finished run of this benchmark, agent and model."""
    if client is None:
        return None
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], f"params.`model.name` = '{model}' and attributes.status = "
                              "'FINISHED'", order_by=["attributes.start_time DESC"], max_results=20)
    for run in runs:
        m = run.data.metrics
        trials = m.get("trials_valid", 0)
        if run.data.params.get("agent.name", agent) not in (agent, "auto") or not trials:
            continue
        roles = {key.split("/", 1)[1] for key in m if key.startswith("calls/") and key != "calls/all"}
        if roles:
            return {role: {"calls": m.get(f"calls/{role}", 0) / trials,
                           "input": m.get(f"input_tokens/{role}", 0) / max(1, m.get(f"calls/{role}", 0)),
                           "output": m.get(f"output_tokens/{role}", 0) / max(1, m.get(f"calls/{role}", 0))}
                    for role in roles}, f"run {run.info.run_id[:8]}"
    return None


def estimate(benchmark: str, settings, trials: int, client=None) -> list[Line]:
    """The lines of one run: for each role that calls a model, its expected calls, tokens and dollars."""
    per_trial = {role: dict(v) for role, v in (profile().get(benchmark) or {}).items()}
    sources = dict.fromkeys(per_trial, "profile")
    agent_model = (settings.agent_model or {}).get("name")
    if agent_model and (seen := measured(client, benchmark, settings.agent, agent_model)) is not None:
        for role, figures in seen[0].items():
            per_trial[role], sources[role] = figures, seen[1]
    lines = []
    for role, f in per_trial.items():
        model = getattr(settings, ROLE_MODEL.get(role, "agent_model"), None)
        if not model:                       # this run does not call a model in that role (reference, replay, ...)
            continue
        calls = f["calls"] * trials
        usage = Usage(int(calls * f["input"]), int(calls * f["output"]))
        price = Price(**(model.get("price") or {}))
        lines.append(Line(model.get("name", "?"), role, calls, usage.input_tokens, usage.output_tokens,
                          price.cost(usage), sources[role]))
    return lines


def merged(lines: list[Line]) -> list[Line]:
    """Lines of several runs summed by model and role (a suite's total)."""
    out: dict[tuple[str, str], Line] = {}
    for x in lines:
        if (key := (x.model, x.role)) in out:
            y = out[key]
            out[key] = Line(x.model, x.role, y.calls + x.calls, y.input_tokens + x.input_tokens,
                            y.output_tokens + x.output_tokens, y.cost_usd + x.cost_usd,
                            y.source if y.source == x.source else "several")
        else:
            out[key] = x
    return list(out.values())


def table(lines: list[Line], title: str) -> str:
    from rich.console import Console
    from rich.table import Table

    shown = Table()
    for col in ("model", "role", "calls", "input tokens", "output tokens", "$", "from"):
        shown.add_column(col, justify="left" if col in ("model", "role", "from") else "right")
    for x in lines:
        shown.add_row(x.model, x.role, f"{x.calls:,.0f}", f"{x.input_tokens:,.0f}", f"{x.output_tokens:,.0f}",
                      f"{x.cost_usd:,.2f}", x.source)
    shown.add_row("all", "", f"{sum(x.calls for x in lines):,.0f}", f"{sum(x.input_tokens for x in lines):,.0f}",
                  f"{sum(x.output_tokens for x in lines):,.0f}", f"{sum(x.cost_usd for x in lines):,.2f}", "")
    console = Console(width=200)
    with console.capture() as cap:
        console.print(shown)
    return f"{title}\n{cap.get()}"
