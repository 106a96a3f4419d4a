"""One trial as a coroutine: `await run_trial(task_key, trial, agent, user, tools, score, limits) -> TrialRecord`.

With a simulated user (multi-turn), the user opens, the agent acts one tool call or one message per step, and the
user says when the conversation is over (`Turn.done`); only then is the reward computed. Without one
(single-turn), the task's question opens and the agent's first message is its answer. Step and time limits end a
trial with reward 0; the time limit counts the agent's own model time, as the EHR-ChatQA harness does (a slow user,
tool or rate-limiter queue does not use it up), and the wall time is recorded beside it. Failures of the infrastructure (model API, user simulator, tools) end it with reward None and
a termination reason of their own, so the runner re-runs the trial instead of scoring it. Nothing here knows about
Ray, MLflow or any benchmark.

Agents, users, tools and scorers are async: a trial spends nearly all its time waiting on a model, so one process
runs hundreds of trials at once on one event loop, and concurrency is bounded by the model provider, not by threads.
Every message carries `t`, seconds since the trial started, and `dt`, how long producing it took (the spans of the
trial's trace).
"""
from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Awaitable, Callable, Protocol

from .db.limits import cap_observation


class InfrastructureError(Exception):
    """Raised by model clients, user simulators or tool hosts when the failure is not the agent's doing."""

    def __init__(self, message: str, source: str = "model", agent_caused: bool = False, status: int | None = None):
        super().__init__(message)
        self.source = source  # "model" | "user" | "tool"
        self.status = status if isinstance(status, int) else None   # the provider's HTTP status, when it sent one
        # The provider refused what the request held (a context overflow, a malformed conversation: HTTP 400):
        # in the agent's own turn that is the agent's doing, scored as its benchmark scores a failed turn; anywhere
        # else (a user, a judge) it is re-run like any infrastructure failure.
        self.agent_caused = agent_caused


class Termination(str, Enum):
    USER_STOP = "user_stop"            # the simulated user ended the conversation: scored
    ANSWERED = "answered"              # single-turn: the agent gave its answer: scored
    MAX_STEPS = "max_steps"
    TIME_LIMIT = "time_limit"
    AGENT_ERROR = "agent_error"
    INFRA_MODEL = "infra_error_model"
    INFRA_USER = "infra_error_user"
    INFRA_TOOL = "infra_error_tool"
    INFRA_WORKER = "infra_error_worker"  # the process running the trial died (Ray reported it)
    INFRA_HARNESS = "infra_error_harness"  # benchmark or harness code raised: a bug to fix, never the agent's score
    INFRA_BUDGET = "infra_error_budget"  # the run's budget_usd would be passed: stopped unscored, run by a resume
    REJECTED = "rejected_by_validator"   # the simulated user broke its rules: kept, never scored, re-run
    CONTEXT_OVERFLOW = "context_overflow"  # the agent's conversation outgrew its model's context: ended, scored 0

    @property
    def is_infrastructure(self) -> bool:
        return self.value.startswith("infra_error")


_INFRA_BY_SOURCE = {"model": Termination.INFRA_MODEL, "budget": Termination.INFRA_BUDGET}


@dataclass
class ToolCall:
    name: str
    arguments: dict
    id: str = ""
    error: str | None = None    # set when the model's call could not be parsed: answered with an error observation
    raw: str | None = None      # the arguments' text as the model wrote it (where the provider sends text)


@dataclass
class Message:
    role: str                           # "user" | "assistant" | "tool"
    content: str | None = None
    tool_call: ToolCall | None = None   # on assistant messages that call a tool
    tool_call_id: str | None = None     # on tool messages
    t: float = 0.0                      # when it was asked for, seconds since the trial started
    dt: float = 0.0                     # how long the model, user or tool took to produce it
    finish_reason: str | None = None    # the provider's, when the model's turn did not end normally ("length")
    provider_parts: list | None = None  # the provider's own parts (Gemini thought signatures), sent back as they came

    @property
    def is_tool_call(self) -> bool:
        return self.tool_call is not None


class Agent(Protocol):
    async def act(self, history: list[Message]) -> Message: ...


@dataclass(frozen=True)
class Turn:
    """A simulated user's reply; `done` ends the conversation (each benchmark decides how its user says so)."""
    text: str
    done: bool = False


class User(Protocol):
    async def reply(self, history: list[Message]) -> Turn: ...


class Tools(Protocol):
    """A trial's tools; one holding resources of its own also has `async close()`, called once the trial ended,
    however it ended."""
    async def call(self, name: str, arguments: dict) -> str: ...


CONTEXT_EXCEEDED = "context_window_exceeded"
"""`Message.finish_reason` of an agent's empty reply standing for a conversation its model could not take any more
(EHR-ChatQA's `get_action` on ContextWindowExceededError): the user answers it, then the trial ends, scored as the
user's reply leaves it (a finished conversation is scored in full, anything else 0)."""

LIMITER_WAIT: ContextVar[list[float] | None] = ContextVar("limiter_wait", default=None)
"""Set by `run_trial` while the agent acts: model clients add the seconds they queued for a rate-limiter slot."""


@dataclass(frozen=True)
class Limits:
    max_steps: int = 30                  # agent actions (tool calls and messages)
    time_limit_s: float = 600.0          # the agent's own model time, as the original counts it (not wall time)
    max_observation_chars: int | None = 50_000  # a longer tool observation is cut, saying so; None: never cut


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
    duration_s: float = 0.0                        # wall time of the whole trial
    agent_time_s: float = 0.0                      # time in the agent's model calls, the time limit's measure
    started_at: float = 0.0                        # wall clock (time.time()) when the trial began
    error: str | None = None
    attempt: int = 0                               # re-submissions after infrastructure failures
    rerun: int = 0                                 # re-runs after the validator rejected the simulation
    usage: dict = field(default_factory=dict)      # role -> calls, tokens, cost_usd
    model_calls: list[dict] = field(default_factory=list)  # role, t, dt, tokens of each model call
    exchanges: list[dict] = field(default_factory=list)    # each model call's request key and reply (a rescore's replay)
    validation: dict | None = None                 # the simulation validator's verdict, when one ran
    score_parts: dict = field(default_factory=dict)  # what the reward is made of (rubric leaves, F1 terms, ...)
    assessments: list[dict] = field(default_factory=list)  # graders' decisions: name, value, source, rationale
    final: bool = True                             # False on a validator-rejected attempt that was run again
    memory: list[dict] = field(default_factory=list)   # what it adds to the run's shared memory: stream, key, item

    @property
    def valid(self) -> bool:
        """Scored: neither broken by infrastructure nor rejected by the simulation validator."""
        t = Termination(self.termination)
        return not t.is_infrastructure and t is not Termination.REJECTED

    def tool_arguments(self, name: str) -> list[dict]:
        """The arguments of every call of tool `name`, in order (calls whose arguments were not an object skipped)."""
        return [m["tool_call"]["arguments"] for m in self.messages
                if m.get("tool_call") and m["tool_call"]["name"] == name
                and isinstance(m["tool_call"]["arguments"], dict)]

    def agent_texts(self) -> list[str]:
        """The agent's messages the user was shown (text sent beside a tool call never reaches the user)."""
        return [m["content"] for m in self.messages
                if m["role"] == "assistant" and m.get("content") and not m.get("tool_call")]


@dataclass
class Score:
    """A reward in [0, 1], what it is made of, and what the trial adds to the run's shared memory (items
    {stream, key, item} the driver stores once the record is on disk, so a resumed run can store them again)."""
    reward: float
    parts: dict = field(default_factory=dict)
    memory: list[dict] = field(default_factory=list)


Scorer = Callable[[TrialRecord], Awaitable["float | Score"]]


async def run_trial(task_key: str, trial: int, agent: Agent, user: User | None, tools: Tools, score: Scorer,
                    limits: Limits = Limits(), opening: str | None = None, greeting: str | None = None,
                    clock: Callable[[], float] = time.monotonic) -> TrialRecord:
    """`user=None` is single-turn: `opening` is the first user message and the agent's first message ends it.
    With a user, `greeting` is what the user sees before its opening turn (None: nothing)."""
    if user is None and not opening:
        raise ValueError("a single-turn trial (no user) needs its opening question")
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
        elif termination in (Termination.USER_STOP, Termination.ANSWERED):
            try:
                result = await score(record)
            except InfrastructureError as e:     # scoring needs the tools' hosts too (and a grader, the budget)
                return await finish(Termination.INFRA_BUDGET if e.source == "budget" else Termination.INFRA_TOOL,
                                    f"while scoring: {e}")
            if isinstance(result, Score):
                record.reward, record.score_parts, record.memory = result.reward, result.parts, result.memory
            else:
                record.reward = result
        else:
            record.reward = 0.0
        return record

    asked = clock()
    if user is None:
        history.append(timed(Message("user", opening), asked))
    else:
        try:
            first = await user.reply([Message("assistant", greeting)] if greeting else [])
        except InfrastructureError as e:
            return await finish(Termination.INFRA_BUDGET if e.source == "budget" else Termination.INFRA_USER, str(e))
        history.append(timed(Message("user", first.text), asked))
    async def _consequence(action: Message) -> TrialRecord | None:
        """Run the agent's tool call, or pass its message to the user; a finished record when the trial ends."""
        asked = clock()
        if action.is_tool_call:
            try:
                call = action.tool_call
                observation = f"Error: {call.error}" if call.error else await tools.call(call.name, call.arguments)
            except InfrastructureError as e:
                return await finish(Termination.INFRA_TOOL, str(e))
            observation = str(observation)
            if limits.max_observation_chars is not None:
                observation = cap_observation(observation, limits.max_observation_chars)
            history.append(timed(Message("tool", observation, tool_call_id=action.tool_call.id), asked))
            return None
        if user is None:
            return await finish(Termination.ANSWERED)
        try:
            reply = await user.reply(history)
        except InfrastructureError as e:
            return await finish(Termination.INFRA_BUDGET if e.source == "budget" else Termination.INFRA_USER, str(e))
        history.append(timed(Message("user", reply.text), asked))
        if reply.done:
            return await finish(Termination.USER_STOP)
        if action.finish_reason == CONTEXT_EXCEEDED:     # the model cannot go on: the conversation ends here
            return await finish(Termination.CONTEXT_OVERFLOW, "the conversation outgrew the agent model's context")
        return None

    queued = [0.0]                       # seconds the agent's calls waited for a rate-limiter slot (not counted)
    token = LIMITER_WAIT.set(queued)
    try:
        while record.steps < limits.max_steps:
            asked, queued[0] = clock(), 0.0
            try:
                action = timed(await agent.act(history), asked)
            except InfrastructureError as e:
                if e.agent_caused:                     # its own conversation was refused: scored, never re-run
                    return await finish(Termination.AGENT_ERROR, str(e))
                return await finish(_INFRA_BY_SOURCE.get(e.source, Termination.INFRA_TOOL), str(e))
            except Exception as e:  # noqa: BLE001 - an agent bug ends its own trial, scored 0
                return await finish(Termination.AGENT_ERROR, f"{type(e).__name__}: {e}")
            record.agent_time_s += max(0.0, clock() - asked - queued[0])
            if record.agent_time_s > limits.time_limit_s:      # checked after the call, before acting on it
                return await finish(Termination.TIME_LIMIT)
            record.steps += 1
            history.append(action)
            done = await _consequence(action)
            if done is not None:
                return done
        return await finish(Termination.MAX_STEPS)
    finally:
        LIMITER_WAIT.reset(token)
