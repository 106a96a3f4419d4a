"""ClinSQL's rubric trees: the JSON shape, read strictly, and the aggregation rule that reproduces published scores.

A tree is nested nodes {id, requirements, sequential, critical, weight (default 1), scoring ("1/0"), sub_tasks}; the
leaves are the decisions (0 or 1, by the deterministic checker or an LLM grader) and every inner node is aggregated
from its children, as ClinSQL's evaluation/clinical_rubric_scorer.py does:
- a sequential node takes the weighted mean of its children in order, up to and including the first child scoring
  below 1 (critical flags ignored);
- any other node scores 0 when a critical child scores below 1, else the weighted mean of its non-critical
  children (1 when it has none).
Leaf decisions are keyed by node id, as the original's are: two leaves with one id share the later decision.
Unlike the original, a malformed node (missing id or requirements, a non-numeric weight, children under another
key than `sub_tasks`) is an error naming the file and node, never silently skipped; other extra keys (the
validation split has `sequential_order`) are kept in `extra` and play no part, as in the original.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterator

KEYS = {"id", "requirements", "sequential", "critical", "weight", "scoring", "sub_tasks"}


class RubricError(ValueError):
    """A rubric tree that cannot be used; says where in which file."""


@dataclass(frozen=True)
class Node:
    id: str
    requirements: str
    sequential: bool = False
    critical: bool = False
    weight: float = 1
    scoring: object = "1/0"     # free text in practice ("1/0", "0/1", "1.0-30.0", numbers): leaves decide 0 or 1
    sub_tasks: tuple["Node", ...] = field(default_factory=tuple)
    extra: tuple[tuple[str, str], ...] = ()       # keys outside the shape, kept (as JSON text) so a copy is faithful

    @property
    def is_leaf(self) -> bool:
        return not self.sub_tasks

    def leaves(self) -> Iterator["Node"]:
        if self.is_leaf:
            yield self
        for child in self.sub_tasks:
            yield from child.leaves()

    def walk(self, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], "Node"]]:
        """Every node with the requirements of its ancestors (top-level category first)."""
        yield path, self
        for child in self.sub_tasks:
            yield from child.walk(path + (self.requirements,))

    def to_json(self) -> dict:
        out = {"id": self.id, "requirements": self.requirements}
        if self.weight != 1:
            out["weight"] = self.weight
        out.update({"sequential": self.sequential, "critical": self.critical})
        if self.is_leaf:
            out["scoring"] = self.scoring
        out["sub_tasks"] = [c.to_json() for c in self.sub_tasks]
        out.update({k: json.loads(v) for k, v in self.extra})
        return out


def parse(data, where: str = "rubric", path: str = "root") -> Node:
    """A node from JSON; `where` (the file) and `path` name the place in errors."""
    if not isinstance(data, dict):
        raise RubricError(f"{where}: {path}: a rubric node must be a JSON object, not {type(data).__name__}")
    if any(k in data for k in ("subtasks", "sub_task", "children")):
        raise RubricError(f"{where}: {path}: children go in `sub_tasks` (found {sorted(set(data) - KEYS)})")
    for key in ("id", "requirements"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise RubricError(f"{where}: {path}: `{key}` must be a non-empty string")
    weight = data.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
        raise RubricError(f"{where}: {path} ({data['id']}): `weight` must be a number >= 0, not {weight!r}")
    for key in ("sequential", "critical"):
        if not isinstance(data.get(key, False), bool):
            raise RubricError(f"{where}: {path} ({data['id']}): `{key}` must be true or false")
    children = data.get("sub_tasks", [])
    if not isinstance(children, list):
        raise RubricError(f"{where}: {path} ({data['id']}): `sub_tasks` must be a list")
    return Node(data["id"], data["requirements"], data.get("sequential", False), data.get("critical", False),
                weight, data.get("scoring", "1/0"),
                tuple(parse(c, where, f"{path}/{data['id']}[{i}]") for i, c in enumerate(children)),
                tuple((k, json.dumps(data[k])) for k in sorted(set(data) - KEYS)))


def score(node: Node, decisions: dict[str, float]) -> float:
    """The node's score from its leaves' decisions (id -> 0/1); a leaf without a decision scores 0."""
    if node.is_leaf:
        return float(decisions.get(node.id, 0.0))
    if node.sequential:
        total = weighted = 0.0
        for child in node.sub_tasks:
            s = score(child, decisions)
            weighted += child.weight * s
            total += child.weight
            if s < 1.0:
                break
        return weighted / total if total else 0.0
    if any(score(c, decisions) < 1.0 for c in node.sub_tasks if c.critical):
        return 0.0
    rest = [c for c in node.sub_tasks if not c.critical]
    total = sum(c.weight for c in rest)
    return sum(c.weight * score(c, decisions) for c in rest) / total if total else 1.0


def category_of(root: Node) -> dict[str, str]:
    """leaf id -> its top-level category ("Patient Cohort Construction", "Output Format Validation", ...)."""
    out = {}
    for child in root.sub_tasks:
        for leaf in child.leaves():
            out.setdefault(leaf.id, child.requirements)
    return out
