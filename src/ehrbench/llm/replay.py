"""A trial's model calls, recorded and replayed: what `ehrbench-report rescore` needs to score a finished run again
without paying for a single call.

Every metered call leaves an exchange on its trial's record (`TrialRecord.exchanges`): the role, the request's key
(`cache.request_key`: every field of the request hashed) and the response (or the turn error it raised). A
`Cassette` built from those exchanges answers a re-run of the same trial: the agent's and the user's calls in the
order they were made, each checked against the recorded request (a setting that changes what the agent sees is a
new run, not a rescore); a grader's and a validator's by the request's key, so a scorer option that asks a judge
something it was not asked finds no answer (`ReplayMiss`) instead of a wrong one. Where trials read a memory shared
across the run (EHRAgent's sequential memory, AgentEHR's), the agent's prompt held what the memory held when the
trial ran, which a rescore cannot rebuild: there only the transcript is checked (`check_prompts=False`). Roles in `ask` are not replayed:
their calls go to the configured model again (`rescore --graders ask`).
"""
from __future__ import annotations

import hashlib
import json
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field, fields

from ..trial import InfrastructureError, ToolCall
from .base import ChatModel, ChatRequest, ChatResponse, ModelTurnError, Usage

KEYED_ROLES = ("grader", "validator")
USER_ROLES = ("user", "verifier", "reflection")     # matched by request: their prompts are the scorer's, not the trajectory's


NOT_ASKED = ("retry_empty",)        # request fields that say how a failure is read, not what is asked


def replay_key(request: ChatRequest) -> str:
    """What the request asks, hashed: every field and every message's role, text and tool call, but not the
    messages' timings or the provider's own parts (a replay never has them), nor which client sends it, nor how
    its failures are read (`NOT_ASKED`)."""
    payload = {f.name: getattr(request, f.name) for f in fields(request) if f.name not in ("messages", *NOT_ASKED)}
    payload["response_schema"] = asdict(request.response_schema) if request.response_schema else None
    payload["messages"] = [{"role": m.role, "content": m.content, "tool_call_id": m.tool_call_id,
                            "tool_call": asdict(m.tool_call) if m.tool_call else None} for m in request.messages]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def response_json(response: ChatResponse) -> dict:
    """What a replay needs of a response (the provider's own parts are left out: a replay sends nothing back)."""
    return {"text": response.text, "tool_calls": [asdict(c) for c in response.tool_calls],
            "usage": asdict(response.usage), "malformed": response.malformed,
            "finish_reason": response.finish_reason, "reasoning": response.reasoning}


def error_json(error: Exception) -> dict:
    if isinstance(error, ModelTurnError):
        return {"kind": "turn", "message": str(error), "blocked": error.blocked, "turn": error.kind}
    return {"kind": "infrastructure", "message": str(error), "source": getattr(error, "source", "model"),
            "agent_caused": getattr(error, "agent_caused", False), "status": getattr(error, "status", None)}


class ReplayMiss(InfrastructureError):
    """The re-run asked something the recorded run never asked: the trial cannot be scored again from its record."""

    def __init__(self, message: str):
        super().__init__(message, source="model")


@dataclass
class Cassette:
    """One trial's recorded exchanges, served back: by order within a role, or by request key (`KEYED_ROLES`)."""
    exchanges: list[dict]
    ask: frozenset = frozenset()                  # roles whose calls go to the real model again
    check_prompts: bool = True                    # each ordered call's request must be the recorded one
    _ordered: dict = field(default_factory=dict, repr=False)
    _keyed: dict = field(default_factory=dict, repr=False)
    served: int = 0
    served_by_role: dict = field(default_factory=dict)
    misses: list = field(default_factory=list)

    def __post_init__(self):
        ordered, keyed = defaultdict(deque), defaultdict(deque)
        for e in self.exchanges:
            if e["role"] in KEYED_ROLES:
                keyed[(e["role"], e["key"])].append(e)
            else:
                ordered[e["role"]].append(e)
        self._ordered, self._keyed = dict(ordered), dict(keyed)

    def take(self, role: str, key: str) -> dict:
        queue = self._keyed.get((role, key)) if role in KEYED_ROLES else self._ordered.get(role)
        why = None
        if not queue:
            why = (f"the {role} was asked something the recorded run never asked it (a scorer option changed its "
                   "prompt): rescore with --graders ask to ask it again") if role in KEYED_ROLES else \
                  f"the {role} made more calls than the recorded trial (the trajectory changed)"
        elif self.check_prompts and role not in KEYED_ROLES and queue[0].get("key") not in (None, key):
            why = (f"the {role}'s request at its call {self.served_by_role.get(role, 0) + 1} differs from the "
                   f"recorded one (the setting changes what the {role} sees: that needs a new run)")
        if why:
            self.misses.append(why)
            raise ReplayMiss(f"replay: {why}")
        self.served += 1
        self.served_by_role[role] = self.served_by_role.get(role, 0) + 1
        return queue.popleft()

    def unused(self) -> int:
        """The agent's recorded calls the re-run never made (a trajectory that ended sooner). The user's roles are
        left out: they may be served by a copy in a user simulator actor, and their replies are the transcript's."""
        return sum(len(q) for role, q in self._ordered.items() if role not in self.ask and role not in USER_ROLES)


class ReplayModel(ChatModel):
    """Answers one role's calls from a `Cassette`; costs nothing and reaches no provider."""

    def __init__(self, cassette: Cassette, role: str, provider: str, model: str):
        self.cassette, self.role, self.provider, self.model = cassette, role, provider, model
        self.attempts = self.calls = 0

    async def complete(self, request: ChatRequest) -> ChatResponse:
        exchange = self.cassette.take(self.role, replay_key(request))
        if error := exchange.get("error"):
            if error["kind"] == "turn":
                raise ModelTurnError(error["message"], blocked=error.get("blocked", False), kind=error.get("turn"))
            raise InfrastructureError(error["message"], source=error.get("source", "model"),
                                      agent_caused=error.get("agent_caused", False), status=error.get("status"))
        r = exchange["response"]
        return ChatResponse(text=r["text"], tool_calls=[ToolCall(**c) for c in r["tool_calls"]],
                            usage=Usage(**r["usage"]), malformed=r["malformed"], finish_reason=r["finish_reason"],
                            reasoning=r.get("reasoning"))
