"""RetroSum's evolving memory (the public code's RetroSumEvolving/ and MCPRetroSumAgent.execute), in two phases.

Build (`benchmark.memory=build`, on the train split): each task's train samples run one at a time, in file order.
Before a trial the agent recalls from the memory built so far; after it, the trial is judged (success: F1 >= 0.2 and
>= the mean F1 of the trials before it, `TrajectoryJudge(use_historical_comparison=True)`), and the model extracts
at most 10 experience items from it with the original's reasoning-audit prompt, success or not (the original's
`extract_from_failures=True`). The entry {key vector, items, F1, success} goes to the run's MemoryActor (one stream
per task and trial index) and, at the end, to `memory.jsonl` among the run's artifacts.
Use (`benchmark.memory=use`, `benchmark.memory_file=...memory.jsonl`): the memory is frozen; every trial recalls.

Recall: the key is an embedding of the patient's latest records per table at t (get_latest_records on every EHR
table, as the original's `retrieve_info="latest"`); the entry with the highest cosine >= 0.5 (top 1) is retrieved
and its items are appended to the first user message under "## Relevant Past Experience".

Deliberate differences, all written here: the key embeds each table's latest records apart with the project's
all-MiniLM-L6-v2 (256-token window) and averages them, where the original embeds one string of them all with bge-m3
(8,192 tokens); the original's second extraction (summary-side items, from a final summary) is not made, because
the public code never shows those items to any model (`prompt_gen.experience` is never read); and a train trial
that ends without an answer (the time limit, a harness fault) leaves no entry, where the original records its 0.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

import numpy as np

from ...llm.base import ChatRequest, Sampling
from ...trial import Message, TrialRecord

SUCCESS_F1 = 0.2
MAX_TRAJECTORY_CHARS = 4 * 32_000      # the original keeps the last 32,000 tokens (4 characters a token)


def stream(task: str, trial: int) -> str:
    return f"{task}#{trial}"


def judge(f1: float, previous: list[float]) -> bool:
    """The original's judge: F1 >= 0.2 and >= the mean of the earlier trials' F1 (0 before any)."""
    return f1 >= SUCCESS_F1 and f1 >= sum(previous) / (len(previous) + 1e-9)


def parse_items(text: str) -> list[dict]:
    """`# Memory Item i / ## Title / ## Description / ## Content` sections (the original's parser): an item needs a
    title and content; a missing description becomes the title."""
    text = (text or "").strip()
    if text.startswith("```"):
        lines = text.split("\n")[1:]
        text = "\n".join(lines[:-1] if lines and lines[-1].strip() == "```" else lines)
    sections, current = [], []
    for line in text.split("\n"):
        if line.strip().startswith("# Memory Item") and current:
            sections.append(current)
            current = []
        current.append(line)
    sections.append(current)
    items = []
    for lines in sections:
        found: dict[str, str] = {}
        i = 0
        while i < len(lines):
            line = lines[i].strip()
            for name in ("Title", "Description", "Content"):
                if line.startswith(f"## {name}"):
                    rest = line[len(name) + 3:].strip()
                    if rest or i + 1 >= len(lines):
                        found[name] = rest
                    elif name != "Content":
                        i += 1
                        found[name] = lines[i].strip()
                    else:                         # content on the following lines, up to the next heading
                        body = []
                        while i + 1 < len(lines) and not lines[i + 1].strip().startswith("#"):
                            i += 1
                            body.append(lines[i].strip())
                        found[name] = " ".join(b for b in body if b)
            i += 1
        if found.get("Title") and found.get("Content"):
            items.append({"title": found["Title"], "description": found.get("Description") or found["Title"],
                          "content": found["Content"]})
    return items


def section(retrieved: list[tuple[float, dict]]) -> str:
    """The original's `_build_memory_section` over the reasoning items."""
    from .agent import prompts

    out = prompts()["memory_section_header"]
    for i, (similarity, entry) in enumerate(retrieved, 1):
        out += f"### Memory {i} (Similarity: {similarity:.2f})\n"
        for item in entry["items"]:
            out += f"- **{item['title']}**: {item['description']}\n  *Content*: {item['content']}\n"
        out += "\n"
    return out


def retrieve(key: np.ndarray, entries: list[dict], top_k: int = 1, threshold: float = 0.5) -> list[tuple[float, dict]]:
    """Entries whose key has cosine >= threshold with `key`, best first, at most top_k; an entry without items is
    retrievable too (the original's filter on items is commented out), and then adds no strategy."""
    scored = []
    for entry in entries:
        vector = np.asarray(entry["vector"], dtype=np.float32)
        norm = float(np.linalg.norm(vector) * np.linalg.norm(key))
        similarity = float(vector @ key) / norm if norm else 0.0
        if similarity >= threshold:
            scored.append((similarity, entry))
    scored.sort(key=lambda x: -x[0])
    return scored[:top_k]


@dataclass
class Recall:
    """One trial's use of the memory: its key at t, what it retrieved, the text added to the first message."""
    tools: object                                      # the episode's AgentEhrTools (loaded before recall)
    entries: Callable[[], Awaitable[list[dict]]]       # the memory as it stands (the actor's stream, or the file)
    encode: Callable[[list[str]], Awaitable[np.ndarray]]
    top_k: int = 1
    threshold: float = 0.5
    key: list[float] | None = None
    retrieved: list[tuple[float, dict]] = field(default_factory=list)

    async def latest_records(self) -> list[str]:
        tools, subject = self.tools, str(self.tools.subject_id)
        return [str({"table_name": t, "table_data": await tools.tool_get_latest_records(subject, t)})
                for t in sorted(tools.tables)]

    async def __call__(self) -> str:
        vectors = await self.encode(await self.latest_records())
        mean = np.asarray(vectors, dtype=np.float32).mean(axis=0)
        key = mean / (np.linalg.norm(mean) or 1.0)
        self.key = [round(float(x), 6) for x in key]
        self.retrieved = retrieve(key, await self.entries(), self.top_k, self.threshold)
        return section(self.retrieved) if self.retrieved else ""


def trajectory(record: TrialRecord, answer: list[str]) -> str:
    """The original's full trajectory: "Action: {name: ..., params: ...}\\nObservation: ..." per step after the
    load, the finish step last (its observation is the answer), oldest steps dropped past 32,000 tokens (the last
    one always kept)."""
    steps, calls = [], {}
    for m in record.messages:
        if m.get("tool_call"):
            calls[m["tool_call"]["id"]] = m["tool_call"]
        elif m["role"] == "tool" and (call := calls.get(m.get("tool_call_id"))) and call["name"] != "load_ehr":
            steps.append(f"Action: {{name: {call['name']}, params: {call['arguments']}}}\nObservation: {m['content']}")
    steps.append(f"Action: {{name: finish, params: {{'response': {answer}}}}}\nObservation: {answer}")
    while len(steps) > 1 and sum(map(len, steps)) > MAX_TRAJECTORY_CHARS:
        del steps[0]
    return "\n".join(steps)


async def extract(model, query: str, record: TrialRecord, labels: list[str], answer: list[str],
                  max_items: int = 10, sampling: Sampling = Sampling(temperature=0.0),
                  seed: int | None = None) -> list[dict]:
    """Experience items from one trajectory (the reasoning audit), asked once more when the reply has none. The
    prediction and the ground truth are written as the original's prompt shows them (Python lists; the labels as
    {name} items: ehrbench's samples keep no codes)."""
    from .agent import prompts

    prompt = prompts()["reasoning_extract"].format(
        max_items=max_items, query=query, raw_trajectory=trajectory(record, answer), prediction_result=str(answer),
        ground_truth=str([{"name": n} for n in labels]))
    for _ in range(2):
        response = await model.complete(ChatRequest([Message("user", prompt)], **sampling.request(seed)))
        if items := parse_items(response.text or ""):
            return items[:max_items]
    return []


ENTRY_FIELDS = {"task": str, "key": str, "subject_id": int, "prediction_time": str, "f1": (int, float),
                "success": bool, "items": list, "vector": list}


@functools.lru_cache(maxsize=4)
def read_memory_file(path: str | Path) -> dict[str, list[dict]]:
    """A memory a build run wrote (`memory.jsonl`, one entry per line), by task: its trial 0's, in learned order."""
    from ...benchmark import read_memory_lines

    out: dict[str, list[dict]] = {}
    for entry in read_memory_lines(path, ENTRY_FIELDS, "benchmark.memory=build"):
        if entry.get("trial", 0) == 0:
            out.setdefault(entry["task"], []).append(entry)
    return out
