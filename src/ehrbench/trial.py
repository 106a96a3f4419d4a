"""One trial as a coroutine: `await run_trial(task, agent, user, tools, score, limits) -> TrialRecord`.

The user opens; the agent acts one tool call or one message per step; a user reply containing `###END###` ends the
conversation and only then is the reward computed. Step and time limits end it with reward 0. Failures of the
infrastructure (model API, user simulator, tools) end it with reward None and a termination reason of their own,
so the runner re-runs the trial instead of scoring it. Nothing here knows about Ray or MLflow.

Agents, users, tools and scorers are async: a trial spends nearly all its time waiting on a model, so one process
runs hundreds of trials at once on one event loop, and concurrency is bounded by the model provider, not by threads.
Every message carries `t`, seconds since the trial started, and `dt`, how long producing it took (the spans of the
trial's trace).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Awaitable, Callable, Protocol

END_TOKEN = "###END###"
AGENT_GREETING = "Hi! How can I help you today?"


class InfrastructureError(Exception):
    """Raised by model clients, user simulators or tool hosts when the failure is not the agent's doing."""

    def __init__(self, message: str, source: str = "model"):
        super().__init__(message)
        self.source = source  # "model" | "user" | "tool"


class Termination(str, Enum):
    USER_STOP = "user_stop"
    MAX_STEPS = "max_steps"
    TIME_LIMIT = "time_limit"
    AGENT_ERROR = "agent_error"
    INFRA_MODEL = "infra_error_model"
    INFRA_USER = "infra_error_user"
    INFRA_TOOL = "infra_error_tool"
    REJECTED = "rejected_by_validator"   # the simulated user broke its rules: kept, never scored, re-run

    @property
    def is_infrastructure(self) -> bool:
        return self.value.startswith("infra_error")


@dataclass
class ToolCall:
    name: str
    arguments: dict
    id: str = ""
    error: str | None = None    # set when the model's call could not be parsed: answered with an error observation


@dataclass
class Message:
    role: str                           # "user" | "assistant" | "tool"
    content: str | None = None
    tool_call: ToolCall | None = None   # on assistant messages that call a tool
    tool_call_id: str | None = None     # on tool messages
    t: float = 0.0                      # when it was asked for, seconds since the trial started
    dt: float = 0.0                     # how long the model, user or tool took to produce it

    @property
    def is_tool_call(self) -> bool:
        return self.tool_call is not None


class Agent(Protocol):
    async def act(self, history: list[Message]) -> Message: ...


class User(Protocol):
    async def reply(self, history: list[Message]) -> str: ...


class Tools(Protocol):
    async def call(self, name: str, arguments: dict) -> str: ...


@dataclass(frozen=True)
class Limits:
    max_steps: int = 30          # agent actions (tool calls and messages)
    time_limit_s: float = 600.0


@dataclass
class TrialRecord:
    task_key: str
    trial: int
    termination: str
    reward: float | None
    messages: list[dict] = field(default_factory=list)
    steps: int = 0
    user_turns: int = 0
    tool_calls: int = 0
    duration_s: float = 0.0
    started_at: float = 0.0                        # wall clock (time.time()) when the trial began
    error: str | None = None
    attempt: int = 0                               # re-submissions after infrastructure failures
    rerun: int = 0                                 # re-runs after the validator rejected the simulation
    usage: dict = field(default_factory=dict)      # role -> calls, tokens, cost_usd
    model_calls: list[dict] = field(default_factory=list)  # role, t, dt, tokens of each model call
    validation: dict | None = None                 # the simulation validator's verdict, when one ran

    @property
    def valid(self) -> bool:
        """Scored: neither broken by infrastructure nor rejected by the simulation validator."""
        t = Termination(self.termination)
        return not t.is_infrastructure and t is not Termination.REJECTED

    def sql_queries(self) -> list[str]:
        return [m["tool_call"]["arguments"].get("query", "") for m in self.messages
                if m.get("tool_call") and m["tool_call"]["name"] == "sql_execute"
                and isinstance(m["tool_call"]["arguments"], dict)]

    def agent_texts(self) -> list[str]:
        return [m["content"] for m in self.messages if m["role"] == "assistant" and m.get("content")]


Scorer = Callable[[TrialRecord], Awaitable[float]]


async def run_trial(task_key: str, trial: int, agent: Agent, user: User, tools: Tools, score: Scorer,
                    limits: Limits = Limits(), clock: Callable[[], float] = time.monotonic) -> TrialRecord:
    start = clock()
    history: list[Message] = []
    record = TrialRecord(task_key=task_key, trial=trial, termination=Termination.MAX_STEPS.value, reward=0.0,
                         started_at=time.time())

    def timed(message: Message, asked: float) -> Message:
        message.t, message.dt = asked - start, clock() - asked
        return message

    async def finish(termination: Termination, error: str | None = None) -> TrialRecord:
        record.termination = termination.value
        record.error = error
        record.messages = [asdict(m) for m in history]
        record.duration_s = clock() - start
        record.user_turns = sum(1 for m in history if m.role == "user")
        record.tool_calls = sum(1 for m in history if m.is_tool_call)
        if termination.is_infrastructure:
            record.reward = None
        elif termination is Termination.USER_STOP:
            record.reward = await score(record)
        else:
            record.reward = 0.0
        return record

    asked = clock()
    try:
        history.append(timed(Message("user", await user.reply([Message("assistant", AGENT_GREETING)])), asked))
    except InfrastructureError as e:
        return await finish(Termination.INFRA_USER, str(e))
    while record.steps < limits.max_steps:
        if clock() - start > limits.time_limit_s:
            return await finish(Termination.TIME_LIMIT)
        asked = clock()
        try:
            action = timed(await agent.act(history), asked)
        except InfrastructureError as e:
            return await finish(Termination.INFRA_MODEL if e.source == "model" else Termination.INFRA_TOOL, str(e))
        except Exception as e:  # noqa: BLE001 - an agent bug ends its own trial, scored 0
            return await finish(Termination.AGENT_ERROR, f"{type(e).__name__}: {e}")
        record.steps += 1
        history.append(action)
        asked = clock()
        if action.is_tool_call:
            try:
                call = action.tool_call
                observation = f"Error: {call.error}" if call.error else await tools.call(call.name, call.arguments)
            except InfrastructureError as e:
                return await finish(Termination.INFRA_TOOL, str(e))
            history.append(timed(Message("tool", observation, tool_call_id=action.tool_call.id), asked))
            continue
        try:
            reply = await user.reply(history)
        except InfrastructureError as e:
            return await finish(Termination.INFRA_USER, str(e))
        history.append(timed(Message("user", reply), asked))
        if END_TOKEN in reply:
            return await finish(Termination.USER_STOP)
    return await finish(Termination.MAX_STEPS)
