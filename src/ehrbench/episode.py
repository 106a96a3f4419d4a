"""One trial of one task for any benchmark: an episode per attempt, re-run while the simulation validator rejects it.

`run_task_trial` asks the benchmark for an episode (tools, agent, scorer) and a user, runs `trial.run_trial`, meters
every model call by role, and when the benchmark has a simulation validator and it finds a user error, keeps that
attempt as `rejected_by_validator` and runs again with the validator's explanations as "previous user mistakes".
Users live in this process (`LocalUsers`) or in UserSimulator actors (`runtime.actors.RemoteUsers`); both open a
`Conversation` from the same plain data, so the trial does not care where its user lives.
"""
from __future__ import annotations

import hashlib
import logging
import traceback

from . import benchmarks
from .benchmark import Hosts, TrialSettings
from .judges.validator import USER_ERROR
from .llm.usage import UsageMeter
from .trial import InfrastructureError, Termination, Turn, TrialRecord, run_trial

_INFRA_KIND = {"model": Termination.INFRA_MODEL, "user": Termination.INFRA_USER, "tool": Termination.INFRA_TOOL,
               "budget": Termination.INFRA_BUDGET}

log = logging.getLogger(__name__)


class Conversation:
    """One simulated user's side of one trial attempt, with the usage its model calls cost."""

    def __init__(self, task, settings: TrialSettings, seed: int, mistakes: list[str]):
        self.meter = UsageMeter()
        bench = benchmarks.load(settings.benchmark, settings.benchmark_options)
        self.user = bench.user(task, settings, self.meter, seed, mistakes)

    async def reply(self, history) -> Turn:
        return await self.user.reply(history)

    async def answer_tool(self, name: str, arguments: dict) -> str:
        """A user the agent also reaches by tool (PhysAssistBench's patient, interviewed by `patient.*`)."""
        return await self.user.answer_tool(name, arguments)

    async def close(self) -> UsageMeter:
        return self.meter


class LocalUsers:
    async def open(self, task, settings: TrialSettings, seed: int, mistakes: list[str]) -> Conversation | None:
        conversation = Conversation(task, settings, seed, mistakes)
        return conversation if conversation.user is not None else None


def trial_seed(task_key: str, trial: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{task_key}#{trial}".encode()).digest()[:4], "big")


async def run_task_trial(task, trial: int, hosts: Hosts, settings: TrialSettings, users=None) -> list[TrialRecord]:
    """Every attempt of one trial: validator-rejected re-runs first (reward None, `final` False), the final one last.

    An infrastructure failure outside the trial loop (opening a remote user, the validator's model) ends the trial
    with that failure as its final record; the attempts before it are kept. Code that raises anything else (a
    benchmark's tool, scorer or agent factory; the harness) ends it as `infra_error_harness`: re-run, never scored,
    the traceback on the record.
    """
    records: list[TrialRecord] = []
    try:
        await _attempts(task, trial, hosts, settings, users, records)
    except InfrastructureError as e:
        records.append(TrialRecord(task.key, trial, _INFRA_KIND.get(e.source, Termination.INFRA_MODEL).value, None,
                                   error=str(e)[:500], rerun=len(records)))
    except Exception as e:  # noqa: BLE001 - reported on the record, with where it happened
        records.append(TrialRecord(task.key, trial, Termination.INFRA_HARNESS.value, None, rerun=len(records),
                                   error=f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"))
    for r in records[:-1]:
        r.final = False
    return records


async def _attempts(task, trial: int, hosts: Hosts, settings: TrialSettings, users, records: list) -> None:
    bench = benchmarks.load(settings.benchmark, settings.benchmark_options)
    users = users or LocalUsers()
    seed = trial_seed(task.key, trial)
    mistakes: list[str] = []
    for rerun in range(settings.max_attempts):
        meter = UsageMeter()
        episode, record = await _attempt(bench, task, trial, hosts, settings, users, seed, rerun, mistakes, meter)
        record.rerun = rerun
        records.append(record)
        if episode.validate and record.valid:
            record.validation = await episode.validate(record)
        record.usage = meter.by_role
        record.model_calls = [{**c, "t": round(c["t"] - record.started_at, 4)} for c in meter.calls]
        record.exchanges = meter.exchanges
        if record.validation and record.validation.get("result") == USER_ERROR:
            record.termination, record.reward = Termination.REJECTED.value, None
            if record.validation.get("explanation"):       # the original keeps only explanations it was given
                mistakes.append(str(record.validation["explanation"]))
            continue
        break


async def _attempt(bench, task, trial: int, hosts: Hosts, settings: TrialSettings, users, seed: int, rerun: int,
                   mistakes: list[str], meter: UsageMeter):
    """One attempt: the episode, its user (the seed moved by the re-run), the trial; the tools closed and the user's
    usage merged into `meter` however it ended. (episode, record)."""
    episode = bench.episode(task, trial, hosts, settings, meter, seed)
    user = await users.open(task, settings, seed + rerun, mistakes) if settings.user != "none" else None
    if user is not None and (attach := getattr(episode.tools, "attach_user", None)) is not None:
        attach(user)                 # tools that talk to the simulated user (an interviewed patient)
    try:
        record = await run_trial(task.key, trial, episode.agent, user, episode.tools, episode.score,
                                 settings.limits, opening=episode.opening, greeting=episode.greeting)
    finally:
        if (close := getattr(episode.tools, "close", None)) is not None:
            try:
                await close()
            except Exception as e:  # noqa: BLE001 - a finished trial stands; its host frees what is left
                log.warning("closing a trial's tools failed: %s", e)
        if user is not None:
            meter.merge(await user.close())
    return episode, record


async def replay_task_trial(task, original: TrialRecord, hosts: Hosts, settings: TrialSettings, users=None,
                            ask: frozenset = frozenset(), mistakes: tuple[str, ...] = ()
                            ) -> tuple[TrialRecord, str | None, int]:
    """A finished trial scored again (`ehrbench-report rescore`): its final attempt re-run with every model call
    answered from the record (`llm/replay.py`), the tools and the scripted parts re-run as they ran, then scored by
    this run's scorer. (the rescored record, None, the model calls it made: those of the roles in `ask`) when the
    re-run retraced the recorded transcript; (the original, why not, calls) when it did not: a score of a different
    conversation would be a wrong score. `mistakes`: the validator's explanations the recorded attempt's user was
    given (from the attempts rejected before it)."""
    from dataclasses import replace

    from .llm.replay import Cassette

    bench = benchmarks.load(settings.benchmark, settings.benchmark_options)
    cassette = Cassette(original.exchanges, frozenset(ask), check_prompts=not bench.resources().memory)
    replayed = replace(settings, replay=cassette)
    meter = UsageMeter()
    _, record = await _attempt(bench, task, original.trial, hosts, replayed, users or LocalUsers(),
                               trial_seed(task.key, original.trial), original.rerun, list(mistakes), meter)
    made = sum(row["calls"] for role, row in meter.by_role.items() if role in cassette.ask)
    if cassette.misses:
        return original, cassette.misses[0], made
    if record.termination != original.termination:
        return original, f"the re-run ended {record.termination}, the recorded trial {original.termination}" + (
            f" ({record.error[:300]})" if record.error else ""), made
    if (where := first_difference(original.messages, record.messages)) is not None:
        return original, where, made
    if left := cassette.unused():
        return original, f"the re-run made {left} model calls fewer than the recorded trial", made
    return replace(original, reward=record.reward, score_parts=record.score_parts, assessments=record.assessments,
                   memory=record.memory), None, made


def first_difference(recorded: list[dict], replayed: list[dict]) -> str | None:
    """Where two transcripts part (their timings aside), or None."""
    def content(m: dict) -> dict:
        return {k: v for k, v in m.items() if k not in ("t", "dt", "provider_parts")}

    for i, (a, b) in enumerate(zip(recorded, replayed)):
        if content(a) != content(b):
            field = next(k for k in sorted(set(content(a)) | set(content(b))) if a.get(k) != b.get(k))
            return (f"message {i} ({a.get('role')}) differs in {field}: recorded {str(a.get(field))[:200]!r}, "
                    f"re-run {str(b.get(field))[:200]!r}")
    if len(recorded) != len(replayed):
        return f"the recorded transcript has {len(recorded)} messages, the re-run {len(replayed)}"
    return None
