"""EHR-ChatQA's scripted user, the offline default: deterministic, follows the instruction, never sees the database.

It opens with the instruction's broad goal, reveals the remaining constraints one or two sentences per turn
(seeded by the trial index, so trials differ in pacing like the paper's stochastic user), asks the agent to double
check once everything is said, and then sends `###END###` alone.
"""
from __future__ import annotations

import random
import re

from ...llm.scripted import ScriptedCall
from ...trial import Message, Turn
from .prompts import END_TOKEN

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_PRONOUNS = [(r"\bYour goal is to\b", "I need to"), (r"\byou are\b", "I am"), (r"\byou do\b", "I do"),
             (r"\byou want\b", "I want"), (r"\bYou want\b", "I want"), (r"\bYou only want\b", "I only want"),
             (r"\bYou only care\b", "I only care"), (r"\bYou also want\b", "I also want"), (r"\byou let\b", "I'll let"),
             (r"\byourself\b", "myself"), (r"\byour\b", "my"), (r"\bSpecifically, \b", ""), (r"\bYou\b", "I"),
             (r"\byou\b", "I")]
DOUBLE_CHECK = "Can you double check that your answer covers everything I asked for?"


def split_instruction(instruction: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(instruction.strip()) if s.strip()]


def first_person(sentence: str) -> str:
    for pattern, repl in _PRONOUNS:
        sentence = re.sub(pattern, repl, sentence)
    return sentence[:1].upper() + sentence[1:]


class ScriptedUser:
    def __init__(self, instruction: str, seed: int = 0, think: ScriptedCall | None = None):
        self.think = think
        self.chunks = [first_person(s) for s in split_instruction(instruction)]
        self.rng = random.Random(seed)
        self.revealed = 0
        self.checked = False

    async def reply(self, history: list[Message]) -> Turn:
        if self.think:
            await self.think()
        if self.revealed < len(self.chunks):
            n = 1 if self.revealed == 0 else self.rng.choice([1, 1, 2])
            text = " ".join(self.chunks[self.revealed:self.revealed + n])
            self.revealed += n
            return Turn(text)
        if not self.checked:
            self.checked = True
            return Turn(DOUBLE_CHECK)
        return Turn(END_TOKEN, done=True)
