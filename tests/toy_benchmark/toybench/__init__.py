"""A toy benchmark that lives outside ehrbench: one tool, one task, single-turn, optionally graded by a model.

It exists to prove the seam is open: `tests/test_seam.py` runs it through the registry (`benchmark.entry`), Ray
(shipped to the workers as a py_module) and MLflow, with nothing of it under src/.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ehrbench.benchmark import Benchmark, Episode
from ehrbench.judges.grader import Grader
from ehrbench.llm.scripted import ScriptedCall
from ehrbench.trial import Message, Score, ToolCall


@dataclass(frozen=True)
class SumTask:
    task_id: str
    question: str
    a: int
    b: int
    answer: str

    @property
    def key(self) -> str:
        return f"sums/{self.task_id}"

    @property
    def groups(self) -> tuple[str, ...]:
        return ("sums",)

    def to_json(self) -> dict:
        return asdict(self)


class AddTool:
    async def call(self, name: str, arguments: dict) -> str:
        if name != "add":
            return f"Error: unknown tool {name!r}; the only tool is add"
        return str(int(arguments["a"]) + int(arguments["b"]))


class ReferenceAgent:
    """Adds with the tool, then answers with what it returned."""

    def __init__(self, task: SumTask, think: ScriptedCall):
        self.task, self.think = task, think

    async def act(self, history: list[Message]) -> Message:
        await self.think()
        if history[-1].role == "user":
            return Message("assistant", tool_call=ToolCall("add", {"a": self.task.a, "b": self.task.b}, id="c1"))
        return Message("assistant", f"The sum is {history[-1].content}.")


class Toy(Benchmark):
    name = "toy"
    agents = ("reference",)
    users = ("none",)

    def tasks(self) -> list[SumTask]:
        return [SumTask("1", "What is 2 + 3?", 2, 3, "5")]

    def episode(self, task, trial, hosts, settings, meter, seed) -> Episode:
        async def score(record) -> Score:
            said = " ".join(record.agent_texts())
            exact = 1.0 if task.answer in said else 0.0
            if settings.grader_model:
                judgement = await Grader(settings.model_for("grader", meter)).grade(
                    "correctness", f"Question: {task.question}\nAnswer: {said}\nIs the answer correct?")
                record.assessments.append(judgement.assessment("toy.grader"))
            return Score(exact, {"exact": exact})
        return Episode(tools=AddTool(), agent=ReferenceAgent(task, ScriptedCall("agent", meter)), score=score,
                       opening=task.question)

    def prompts(self) -> dict[str, str]:
        return {"toy.grader": "Question: {question}\nAnswer: {answer}\nIs the answer correct?"}
