"""An LLM-simulated user (EHR-ChatQA paper A.3): the benchmark's system prompt, temperature 1.0, no tools.

Each candidate reply passes a filter (no SQL, tool syntax, code fences or "Instruction:", and the benchmark's stop
token only as the whole message); a rejected reply is regenerated with the reason fed back, up to 3 times. The reply
that is the stop token ends the conversation (`Turn.done`). Strategies:
- `plain`: the filter only;
- `verify`: a verifier (temperature 0, yes/no) checks each reply; on "no" the reply is regenerated;
- `reflection` (the paper's nested verification-reflection): on "no", a reflection call explains the problem and
  writes a new reply, which is filtered and verified again, up to 3 rounds.
Verifier and reflection prompts carry the "previous user mistakes" the validator found in earlier runs of the task.
A user that cannot produce an acceptable reply fails as infrastructure: the trial is re-run, never graded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..judges.parsing import parse_json_object
from ..llm.base import ChatRequest
from ..llm.usage import MeteredModel
from ..trial import InfrastructureError, Message, Turn

FORBIDDEN = ("SELECT", "tool_call", "tool_code", "default_api", "print(", "```", "Instruction:")
STRATEGIES = ("plain", "verify", "reflection")


@dataclass(frozen=True)
class UserPrompts:
    """What the benchmark tells its simulated user, and how the user says it is done."""
    system: str                                   # the user's system prompt, instruction filled in
    verifier: str = ""                            # template: user_system_prompt, previous_mistakes, conversation,
    reflection: str = ""                          #   candidate
    mistakes_block: Callable[[list[str]], str] = lambda mistakes: ""
    stop_token: str = "###END###"
    agent_label: str = "DB AGENT"


def reject_reason(reply: str | None, stop_token: str = "###END###") -> str | None:
    """Why a user reply is unacceptable, or None (the original harness's filter)."""
    if not reply or not reply.strip():
        return "the reply is empty"
    for token in FORBIDDEN:
        if token in reply:
            return f"the reply contains {token!r}; a user with no SQL or tool knowledge would not write it"
    if stop_token in reply and reply.strip() != stop_token:
        return f"{stop_token} must be the whole message, alone, when ending the conversation"
    return None


def user_view(history: list[Message]) -> list[Message]:
    """The conversation with roles flipped: the agent's messages are the user model's input; tools are hidden."""
    view = []
    for m in history:
        if m.role == "assistant" and m.tool_call is None:
            view.append(Message("user", m.content or ""))
        elif m.role == "user":
            view.append(Message("assistant", m.content or ""))
    return view


def transcript(history: list[Message], agent_label: str = "DB AGENT") -> str:
    lines = []
    for m in history:
        if m.role == "user":
            lines.append(f"[USER]: {m.content}")
        elif m.role == "assistant" and m.tool_call is None:
            lines.append(f"[{agent_label}]: {m.content}")
    return "\n".join(lines)


class LLMUser:
    def __init__(self, model: MeteredModel, prompts: UserPrompts, strategy: str = "reflection",
                 verifier: MeteredModel | None = None, reflection: MeteredModel | None = None,
                 mistakes: list[str] | None = None, temperature: float = 1.0, seed: int | None = None,
                 max_regenerations: int = 3, max_reflections: int = 3):
        if strategy not in STRATEGIES:
            raise ValueError(f"user.strategy={strategy!r}; choose one of {list(STRATEGIES)}")
        if strategy != "plain" and verifier is None:
            raise ValueError(f"user.strategy={strategy!r} needs a verifier model")
        self.model, self.verifier, self.reflector = model, verifier, reflection or verifier
        self.prompts, self.system = prompts, prompts.system
        self.strategy, self.mistakes = strategy, list(mistakes or [])
        self.temperature, self.seed = temperature, seed
        self.max_regenerations, self.max_reflections = max_regenerations, max_reflections

    async def reply(self, history: list[Message]) -> Turn:
        text = await self._checked_reply(history)
        return Turn(text, done=text.strip() == self.prompts.stop_token)

    async def _checked_reply(self, history: list[Message]) -> str:
        candidate = await self._generate(user_view(history))
        if self.strategy == "plain":
            return candidate
        for _ in range(self.max_reflections):
            if await self._verified(history, candidate):
                return candidate
            candidate = await self._reflect(history, candidate) if self.strategy == "reflection" else \
                await self._generate(user_view(history), feedback="A checker found that your last reply broke the rules "
                                                            "or the instruction. Write it again.")
        return candidate

    async def _generate(self, view: list[Message], feedback: str | None = None) -> str:
        messages = list(view)
        if feedback:
            messages.append(Message("user", feedback))
        for _ in range(self.max_regenerations + 1):
            text = (await self.model.complete(ChatRequest(messages, system=self.system, temperature=self.temperature,
                                                   seed=self.seed))).text
            reason = reject_reason(text, self.prompts.stop_token)
            if reason is None:
                return text.strip()
            messages = list(view) + [Message("assistant", text or ""),
                                     Message("user", f"Your reply was rejected: {reason}. Reply again as the user.")]
        raise InfrastructureError(f"user simulator produced no acceptable reply in {self.max_regenerations + 1} tries "
                                  f"(last: {reason})", source="user")

    def _context(self, history: list[Message], candidate: str) -> dict:
        return {"user_system_prompt": self.system, "previous_mistakes": self.prompts.mistakes_block(self.mistakes),
                "conversation": transcript(history, self.prompts.agent_label), "candidate": candidate}

    async def _verified(self, history: list[Message], candidate: str) -> bool:
        prompt = self.prompts.verifier.format(**self._context(history, candidate))
        answer = (await self.verifier.complete(ChatRequest([Message("user", prompt)], temperature=0.0))).text or ""
        return answer.strip().lower().startswith("yes")

    async def _reflect(self, history: list[Message], candidate: str) -> str:
        prompt = self.prompts.reflection.format(**self._context(history, candidate))
        out = parse_json_object((await self.reflector.complete(ChatRequest([Message("user", prompt)],
                                                                           temperature=0.0))).text)
        revised = (out or {}).get("new_response")
        if isinstance(revised, str) and reject_reason(revised, self.prompts.stop_token) is None:
            return revised.strip()
        return candidate  # an unusable reflection keeps the candidate; the next round verifies it again
