"""An LLM-simulated user, as the EHR-ChatQA harness runs it (glee4810/EHR-ChatQA, src/envs/user.py).

The user model keeps its own conversation, roles flipped: its system prompt, the agent's greeting and messages as
"user" turns, its own replies as "assistant" turns. Each reply gets up to 3 attempts. An attempt whose reply fails
the filter (SQL, tool syntax, code fences, "Instruction:", or the stop token not alone) leaves the rejected reply and
the filter's message in that conversation for the next attempt. Strategies, as the original's user classes:
- `plain` (LLMUser): the filter only;
- `verify` (VerifierUser): a verifier (temperature 0) must answer exactly "yes"; otherwise the next attempt
  regenerates, and after 3 attempts the last filtered reply is sent anyway;
- `reflection` (ReflectionUser, the paper's nested verification-reflection): on "no", up to 3 reflection calls
  (structured output {reflection, new_response}) propose a revision, each verified; the last one is sent if none passes.
The first turn (the reply to the greeting) is never verified. Verifier and reflection read the user's system prompt,
a numbered "Previous user mistakes" list (the validator's explanations from earlier runs of the task), the
conversation and the candidate. When every attempt fails, the original ends the conversation with the stop token and
the trial is scored (`on_filter_failure="end"`); `"rerun"` re-runs the trial as an infrastructure error instead. A
failing model API is always an infrastructure error (the trial is re-run, never scored).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..judges.parsing import parse_json_object
from ..llm.base import ChatRequest, ModelTurnError, OutputSchema, Sampling, kind_of
from ..llm.usage import MeteredModel
from ..trial import InfrastructureError, Message, Turn

FORBIDDEN = ("SELECT", "tool_call", "tool_code", "default_api", "print(", "```", "Instruction:")
STRATEGIES = ("plain", "verify", "reflection")
FILTER_FAILURE = ("end", "rerun")
REFLECTION_OUTPUT = OutputSchema("ReflectionOutputFormat", ("reflection", "new_response"))


@dataclass(frozen=True)
class UserPrompts:
    """What the benchmark tells its simulated user and its supervisors, and how the user says it is done."""
    system: str                                   # the user's system prompt, instruction filled in
    verifier_system: str = ""
    reflection_system: str = ""
    supervisor_input: str = "{instruction_rules}\n\nConversation:\n{conversation}\n\nUser Response:\n{response}"
    previous_mistakes: str = "\n\nPrevious user mistakes:\n{mistakes}"
    assistant_like_feedback: str = "Revise your previous response to follow the rules in the system prompt."
    stop_token_feedback: str = "Send only the stop token to end the conversation."
    stop_token: str = "###END###"
    user_label: str = "User"
    agent_label: str = "DB Agent"


class UnusableReply(Exception):
    """One attempt of the user model failed (filtered, unparsable reflection); the next attempt starts over."""


def reject_reason(reply: str, prompts: UserPrompts) -> str | None:
    """The filter's message for the user model when a reply is unacceptable, or None (the original's check)."""
    if any(token in reply for token in FORBIDDEN):
        return prompts.assistant_like_feedback
    if prompts.stop_token in reply and reply.strip() != prompts.stop_token:
        return prompts.stop_token_feedback
    return None


def numbered(mistakes: list[str]) -> str:
    return "".join(f"{i}. {m}\n" for i, m in enumerate(mistakes, start=1))


class LLMUser:
    def __init__(self, model: MeteredModel, prompts: UserPrompts, strategy: str = "reflection",
                 verifier: MeteredModel | None = None, reflection: MeteredModel | None = None,
                 mistakes: list[str] | None = None, temperature: float = 1.0, seed: int | None = None,
                 max_attempts: int = 3, max_reflections: int = 3, on_filter_failure: str = "end",
                 sampling: dict[str, Sampling] | None = None):
        """`sampling`: role (user, verifier, reflection) -> what its requests send (the benchmark's table); without
        it the user samples at `temperature` and its supervisors at 0. A seeded user (`seed`) seeds each call with
        the trial's seed plus its call number, so a regenerated reply can still differ."""
        if strategy not in STRATEGIES:
            raise ValueError(f"user.strategy={strategy!r}; choose one of {list(STRATEGIES)}")
        if on_filter_failure not in FILTER_FAILURE:
            raise ValueError(f"user.on_filter_failure={on_filter_failure!r}; choose one of {list(FILTER_FAILURE)}")
        if strategy != "plain" and verifier is None:
            raise ValueError(f"user.strategy={strategy!r} needs a verifier model")
        self.model, self.verifier, self.reflector = model, verifier, reflection or verifier
        self.prompts, self.strategy, self.mistakes = prompts, strategy, list(mistakes or [])
        self.seed = seed
        self.sampling = {"user": Sampling(temperature=temperature), "verifier": Sampling(temperature=0.0),
                         "reflection": Sampling(temperature=0.0), **(sampling or {})}
        self.max_attempts, self.max_reflections, self.on_filter_failure = max_attempts, max_reflections, on_filter_failure
        self.messages: list[Message] = []   # the user model's side of the conversation (system prompt sent apart)
        self.calls = 0

    async def reply(self, history: list[Message]) -> Turn:
        """`history[-1]`, when there is one, is the agent's latest message (the greeting before the first turn)."""
        if history:
            self.messages.append(Message("user", history[-1].content or ""))
        text = await self._next_message()
        return Turn(text, done=self.prompts.stop_token in text)

    # --- one reply: up to `max_attempts` attempts ----------------------------------------------------------------
    async def _next_message(self) -> str:
        last_filtered: str | None = None
        problems = []
        for _ in range(self.max_attempts):
            try:
                candidate = await self._generate()
                # Only the greeting so far: the original never verifies the first turn (a filtered attempt adds two
                # messages, so the attempts after it are verified, as there).
                if self.strategy == "plain" or len(self.messages) <= 1:
                    return self._send(candidate)
                last_filtered = candidate
                if await self._verified(candidate):
                    return self._send(candidate)
                if self.strategy == "reflection":
                    revised = candidate
                    for _ in range(self.max_reflections):
                        revised = await self._reflect(revised)
                        if await self._verified(revised):
                            break
                    return self._send(revised)           # verified, or the last revision when none passed
            except (UnusableReply, ModelTurnError, InfrastructureError) as e:
                if isinstance(e, InfrastructureError) and kind_of(e) is None:   # an outage: the trial is re-run
                    raise
                problems.append(str(e))        # as the original: a failed call (a refused one too) costs an attempt
        if self.strategy == "verify" and last_filtered is not None:
            return self._send(last_filtered)             # never verified: the last filtered reply is sent anyway
        if self.on_filter_failure == "rerun":
            raise InfrastructureError(f"user simulator produced no acceptable reply in {self.max_attempts} attempts "
                                      f"({'; '.join(problems)[:300]})", source="user")
        return self.prompts.stop_token

    def _send(self, text: str) -> str:
        self.messages.append(Message("assistant", text))
        return text.strip()

    async def _generate(self) -> str:
        self.calls += 1      # a fresh seed per call: a regenerated reply must be able to differ, as unseeded it would
        seed = None if self.seed is None else self.seed + self.calls
        params = replace(self.sampling["user"], seed=seed).request()
        response = await self.model.complete(ChatRequest(list(self.messages), system=self.prompts.system, **params))
        if response.text is None:
            raise UnusableReply("the user model sent no text")
        reason = reject_reason(response.text, self.prompts)
        if reason is not None:                           # the rejected reply and why stay in the conversation
            self.messages += [Message("assistant", response.text), Message("user", reason)]
            raise UnusableReply(reason)
        return response.text

    # --- supervisors -------------------------------------------------------------------------------------------
    def supervisor_input(self, candidate: str) -> str:
        rules = self.prompts.system
        if self.mistakes:
            rules += self.prompts.previous_mistakes.format(mistakes=numbered(self.mistakes))
        return self.prompts.supervisor_input.format(instruction_rules=rules, conversation=self.conversation(),
                                                    response=candidate)

    def conversation(self) -> str:
        """The user model's conversation after the greeting, as the original shows it to its supervisors."""
        lines = []
        for m in self.messages[1:]:
            if m.role == "assistant":
                lines.append(f"[{self.prompts.user_label}]: {(m.content or '').strip()}")
            elif m.content:
                lines.append(f"[{self.prompts.agent_label}]: {m.content.strip()}")
        return "\n".join(lines) if lines else "N/A"

    async def _verified(self, candidate: str) -> bool:
        request = ChatRequest([Message("user", self.supervisor_input(candidate))], system=self.prompts.verifier_system,
                              **self.sampling["verifier"].request())
        answer = (await self.verifier.complete(request)).text
        return bool(answer) and answer.strip().lower() == "yes"

    async def _reflect(self, candidate: str) -> str:
        request = ChatRequest([Message("user", self.supervisor_input(candidate))], system=self.prompts.reflection_system,
                              response_schema=REFLECTION_OUTPUT, **self.sampling["reflection"].request())
        out = parse_json_object((await self.reflector.complete(request)).text)
        revised = (out or {}).get("new_response")
        if not isinstance(revised, str):
            raise UnusableReply("the reflection was not JSON with a new_response")
        return revised.strip()
