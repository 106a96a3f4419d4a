"""The twin kit: the authors' harness and ehrbench on the same tasks, over the same database file, with every model
role played by one recording fake provider; then every request each harness sent, and every score, compared.

A twin is recorded once, outside the project (docs/twins.md): the authors' harness in a venv of its own, its clients
routed by environment variables to the provider that `tests/twins/record.py` starts with a scenario's script. The
provider tells each request apart by (task, role) from what it holds (`Router`) and answers from that pair's script,
so the answers do not depend on how either harness orders its calls. The fixture (`Fixture`) keeps the tasks, the
script, the original's requests per pair in order (normalised: `normalise`) and its per-trial scores, with
provenance. `replay` serves the same script to ehrbench's real clients and returns what it sent; `compare` names
every difference, except those the fixture lists as rows of the benchmark's "Differences from the original" table,
each asserted as exactly that difference.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from ..fake_llm_server import FakeLLMServer, Reply

FIXTURES = Path(__file__).parent / "fixtures"
ABSENT = "<absent>"          # a difference's value where one side sends no such field


# --- telling requests apart ----------------------------------------------------------------------------------------
def system_text(path: str, body: dict) -> str:
    """The system prompt of an OpenAI chat request or a Gemini generateContent request ('' when none)."""
    if ":generateContent" in path:
        parts = (body.get("systemInstruction") or body.get("system_instruction") or {}).get("parts", [])
        return "".join(p.get("text", "") for p in parts)
    messages = body.get("messages") or []
    first = messages[0] if messages else {}
    if first.get("role") in ("system", "developer"):
        content = first.get("content")
        return content if isinstance(content, str) else "".join(c.get("text", "") for c in content or [])
    return ""


def has_tools(body: dict) -> bool:
    return bool(body.get("tools") or body.get("functions"))


def is_embedding(path: str) -> bool:
    return path.endswith("/embeddings") or ":batchEmbedContents" in path or ":embedContent" in path


@dataclass
class Router:
    """(path, body) -> (task, role). `roles`: role -> a predicate on (path, body), tried in order; `markers`: task ->
    strings only its requests hold (its instruction, its user's scripted opening). A request no task's marker is in
    belongs to no task (None): an embedding of the database's values, say."""
    roles: list[tuple[str, Callable[[str, dict], bool]]]
    markers: dict[str, list[str]]

    def __call__(self, path: str, body: dict) -> tuple[str | None, str]:
        role = next((name for name, matches in self.roles if matches(path, body)), "unknown")
        text = json.dumps(body, ensure_ascii=False)
        text = text + "\n" + json.dumps(body)           # markers may be written either way (\\u escapes or not)
        found = [task for task, marks in self.markers.items() if any(m and (m in text or json.dumps(m)[1:-1] in text)
                                                                    for m in marks)]
        if len(found) > 1:
            raise ValueError(f"a {role} request holds the markers of tasks {found}: make each task's markers unique")
        return (found[0] if found else None), role


# --- what a model could see, without the wire's noise ---------------------------------------------------------------
def _drop_titles(node):
    """Pydantic writes `title` keys into JSON schemas; hand-written schemas have none. Neither is seen as text."""
    if isinstance(node, dict):
        return {k: _drop_titles(v) for k, v in node.items() if k != "title" or not isinstance(v, str)}
    if isinstance(node, list):
        return [_drop_titles(v) for v in node]
    return node


def _camel(node, inside_schema: bool = False):
    """Gemini's JSON keys in camelCase (`system_instruction` -> `systemInstruction`); a schema's own property names
    and a function call's arguments are data, left as they are."""
    if isinstance(node, list):
        return [_camel(v, inside_schema) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        name = key if inside_schema else re.sub(r"_([a-z])", lambda m: m.group(1).upper(), key)
        data = name in ("properties", "args", "response") or inside_schema and key == "properties"
        out[name] = {k: _camel(v, False) for k, v in value.items()} if data and isinstance(value, dict) \
            else _camel(value, inside_schema)
    return out


def _upper_types(node):
    if isinstance(node, dict):
        return {k: (v.upper() if k == "type" and isinstance(v, str) else _upper_types(v)) for k, v in node.items()}
    return [_upper_types(v) for v in node] if isinstance(node, list) else node


def normalise(path: str, body: dict) -> dict:
    """Everything a model could see or that changes its sampling, as one canonical dict: the same request from two
    clients gives the same dict. Dropped: call ids (numbered in order instead), `content: null` and a parameter sent
    as null (as absent), `n: 1`
    (Gemini's `candidate_count: 1`),
    `stream: false`, pydantic `title` keys in response schemas; an OpenAPI type's case (Gemini reads `string` and
    `STRING` alike); JSON key order never matters."""
    body = json.loads(json.dumps(body))
    if is_embedding(path):
        if ":batchEmbedContents" in path:
            texts = [r["content"]["parts"][0]["text"] for r in body.get("requests", [])]
        else:
            texts = body["input"] if isinstance(body.get("input"), list) else [body.get("input")]
        return {"embed": texts, "model": body.get("model") or path.rsplit("/models/", 1)[-1].split(":")[0]}
    if ":generateContent" in path:
        body = _camel(body)                  # the REST API takes both spellings; clients write one or the other
        (body.get("systemInstruction") or {}).pop("role", None)     # the API reads no role there
    if body.get("n") == 1:
        del body["n"]
    for name in [k for k, v in body.items() if v is None]:     # a parameter sent as null (openai 1.7's `stop=None`)
        del body[name]                                         # is the provider's default, as when absent
    if body.get("stream") is False:
        del body["stream"]
    ids: dict[str, str] = {}

    def number(call_id):
        return ids.setdefault(call_id, f"call_{len(ids)}")
    for m in body.get("messages") or []:
        if "content" in m and m["content"] is None:
            del m["content"]
        for call in m.get("tool_calls") or []:
            call["id"] = number(call.get("id"))
            call.setdefault("type", "function")
            fn = call.get("function") or {}
            try:                                   # arguments: the JSON they hold, not its spacing
                fn["arguments"] = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                pass
        if "tool_call_id" in m:
            m["tool_call_id"] = number(m["tool_call_id"])
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            for kind in ("functionCall", "functionResponse"):
                if kind in part:
                    part[kind].pop("id", None)
    for tool in body.get("tools") or []:         # Gemini's declarations: an OpenAPI Type, spelt either way
        for declaration in tool.get("functionDeclarations") or []:
            if isinstance(declaration.get("parameters"), dict):
                declaration["parameters"] = _upper_types(declaration["parameters"])
    if isinstance(body.get("response_format"), dict):
        body["response_format"] = _drop_titles(body["response_format"])
    config = body.get("generationConfig") or {}
    if isinstance(config.get("responseSchema"), dict):          # an OpenAPI Type, spelt either way ("string")
        config["responseSchema"] = _upper_types(config["responseSchema"])
    if config.get("candidate_count", config.get("candidateCount")) == 1:       # Gemini's `n: 1`
        config.pop("candidate_count", None)
        config.pop("candidateCount", None)
    for key in ("responseJsonSchema", "responseSchema", "response_json_schema"):
        if key in config:
            config[key] = _drop_titles(config[key])
    return json.loads(json.dumps(body, sort_keys=True))


# --- the fixture -----------------------------------------------------------------------------------------------------
@dataclass
class Difference:
    """A row of the benchmark's Differences table, seen in requests, on every request of `role` (and `task`, when
    given), at `field` (a dotted path in the normalised request; `*` for every element of a list). `kind`:
    - "value": the original sends `original` and ehrbench `ehrbench` there (`ABSENT`: the field is not sent);
    - "unordered_list": a text there ending in a Python list (`...: ['a', 'b'].`) lists the same items on both
      sides, in an order that may differ (the original's comes from a `set`, so from Python's string hashing)."""
    row: str
    role: str
    field: str
    original: object = None
    ehrbench: object = None
    task: str | None = None
    kind: str = "value"


@dataclass
class Fixture:
    benchmark: str
    scenario: str
    provenance: dict                     # repository, commit, dependencies, python, command, environment, date
    tasks: list[dict]                    # the tasks as the benchmark's task files hold them
    script: dict[str, dict[str, list[dict]]]      # task -> role -> replies (fields of `Reply`)
    requests: dict[str, dict[str, list[dict]]]    # task -> role -> the original's requests ({path, body}), in order
    scores: dict[str, list[float | None]]          # task -> the original's reward per trial
    ehrbench: dict = field(default_factory=dict)  # how ehrbench runs it: overrides with {placeholders}
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> "Fixture":
        """A fixture file: gzip-compressed JSON (`<benchmark>_<scenario>.json.gz`; each request repeats the whole
        conversation, so the text compresses some twentyfold)."""
        import gzip

        data = json.loads(gzip.decompress(Path(path).read_bytes()))
        data["differences"] = [Difference(**d) for d in data.get("differences", [])]
        return cls(**data)

    def save(self, path: str | Path) -> None:
        import gzip

        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["differences"] = [d.__dict__ for d in self.differences]
        text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
        Path(path).write_bytes(gzip.compress(text.encode(), mtime=0))

    def provider(self, router: Router) -> FakeLLMServer:
        """The recording fake provider with this fixture's script, routed by `router`."""
        from collections import deque

        server = FakeLLMServer(route=router)
        for task, roles in self.script.items():
            for role, replies in roles.items():
                server.scripts[(task, role)] = deque(Reply(**r) for r in replies)
        return server


def by_pair(seen: list, roles: set[str] | None = None) -> dict[str, dict[str, list[dict]]]:
    """What a provider logged, as task -> role -> requests ({path, body}, as they came: normalised when compared,
    so a better normaliser needs no new recording), in order (requests of no task left out; `roles`: only these)."""
    out: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for s in seen:
        task, role = s.key
        if task is not None and (roles is None or role in roles):
            out[task][role].append({"path": s.path, "body": s.body})
    return {t: dict(r) for t, r in out.items()}


# --- comparing -------------------------------------------------------------------------------------------------------
def _get(node, path: list[str]):
    if not path:
        return [node]
    head, rest = path[0], path[1:]
    if head == "*":
        return [v for item in (node if isinstance(node, list) else []) for v in _get(item, rest)]
    if isinstance(node, dict):
        return _get(node[head], rest) if head in node else [ABSENT] if not rest else []
    if isinstance(node, list) and head.isdigit() and int(head) < len(node):
        return _get(node[int(head)], rest)
    return []


def _set(node, path: list[str], value) -> None:
    head, rest = path[0], path[1:]
    if head == "*":
        for item in node if isinstance(node, list) else []:
            _set(item, rest, value)
        return
    if isinstance(node, list):
        if head.isdigit() and int(head) < len(node):
            _set(node[int(head)], rest, value) if rest else node.__setitem__(int(head), value)
        return
    if not rest:
        if value == ABSENT:
            node.pop(head, None)
        else:
            node[head] = value
    elif head in node:
        _set(node[head], rest, value)


LISTED = re.compile(r"^(?P<head>.*?: )(?P<items>\[.*\])(?P<tail>\.?)$", re.DOTALL)


def _unordered(text):
    """A text ending in a Python list literal, its items sorted (other values as they are)."""
    import ast

    found = LISTED.match(text) if isinstance(text, str) else None
    if not found:
        return text
    try:
        items = ast.literal_eval(found["items"])
    except (ValueError, SyntaxError):
        return text
    return f"{found['head']}{sorted(items, key=repr)!r}{found['tail']}" if isinstance(items, list) else text


def _map(node, path: list[str], fn) -> None:
    """`fn` applied in place to every value at `path`."""
    head, rest = path[0], path[1:]
    if head == "*":
        for i, item in enumerate(node if isinstance(node, list) else []):
            if rest:
                _map(item, rest, fn)
            else:
                node[i] = fn(item)
        return
    if isinstance(node, dict) and head in node:
        if rest:
            _map(node[head], rest, fn)
        else:
            node[head] = fn(node[head])


def first_difference(a, b, where: str = "") -> str | None:
    """Where two normalised requests first differ, and how (None: equal)."""
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return f"{where or '.'}: {json.dumps(a)[:300]} != {json.dumps(b)[:300]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}: {'absent' if k not in a else json.dumps(a[k])[:300]} != " \
                       f"{'absent' if k not in b else json.dumps(b[k])[:300]}"
            if (d := first_difference(a[k], b[k], f"{where}.{k}")) is not None:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            if (d := first_difference(x, y, f"{where}[{i}]")) is not None:
                return d
        return None
    return None if a == b else f"{where or '.'}: {json.dumps(a)[:300]} != {json.dumps(b)[:300]}"


def compare(fixture: Fixture, got: dict[str, dict[str, list[dict]]], roles: set[str] | None = None) -> list[str]:
    """Every difference between the original's requests and ehrbench's, per (task, role), in order. A listed
    `Difference` must be there exactly as written (ehrbench's value where the original has its own) and is then
    set to the original's value before the rest is compared; anything else is a difference."""
    problems = []
    for task in sorted(set(fixture.requests) | set(got)):
        want_roles, got_roles = fixture.requests.get(task, {}), got.get(task, {})
        for role in sorted(set(want_roles) | set(got_roles)):
            if roles is not None and role not in roles:
                continue
            want = [normalise(r["path"], r["body"]) for r in want_roles.get(role, [])]
            have = [normalise(r["path"], r["body"]) for r in got_roles.get(role, [])]
            if len(want) != len(have):
                problems.append(f"{task} {role}: the original sent {len(want)} requests, ehrbench {len(have)}")
            for i, (w, h) in enumerate(zip(want, have)):
                for d in fixture.differences:
                    if d.role != role or (d.task and d.task != task):
                        continue
                    path = d.field.split(".")
                    if d.kind == "unordered_list":
                        _map(w, path, _unordered)
                        _map(h, path, _unordered)
                        continue
                    seen_w, seen_h = _get(w, path), _get(h, path)
                    if any(v != d.original for v in seen_w) or any(v != d.ehrbench for v in seen_h) or \
                            len(seen_w) != len(seen_h):
                        problems.append(f"{task} {role} #{i}: the listed difference {d.row!r} at {d.field} is not as "
                                        f"written (original {seen_w[:3]}, ehrbench {seen_h[:3]})")
                    _set(h, path, d.original)
                if (diff := first_difference(w, h)) is not None:
                    problems.append(f"{task} {role} #{i}: {diff}")
    return problems


def summary(problems: list[str], shown: int = 12) -> str:
    """The differences grouped by role and place (each kind once, with how often), then the first few whole."""
    kinds: dict[str, int] = defaultdict(int)
    for p in problems:
        head, _, rest = p.partition(": ")
        role = head.split(" ")[1] if " " in head else head
        kinds[f"{role} {rest.split(':')[0][:120]}"] += 1
    lines = [f"{n:4d} x {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])]
    return "\n".join([f"{len(problems)} differences:", *lines, "first:", *problems[:shown]])


def compare_scores(fixture: Fixture, scores: dict[str, list[float | None]]) -> list[str]:
    return [f"{task}: the original scored {fixture.scores.get(task)}, ehrbench {scores.get(task)}"
            for task in sorted(set(fixture.scores) | set(scores)) if fixture.scores.get(task) != scores.get(task)]


def placeholders(items: list[str], values: dict[str, str]) -> list[str]:
    """Overrides with {name} filled in (the fake provider's url, the tasks' folder, the database files)."""
    return [re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], item) for item in items]


# --- ehrbench's side -------------------------------------------------------------------------------------------
@dataclass
class Replayed:
    requests: dict[str, dict[str, list[dict]]]     # task -> role -> normalised requests, in order
    scores: dict[str, list[float | None]]          # task -> reward per trial (the last attempt of each)
    records: list                                  # ehrbench's TrialRecords
    stderr: str


def replay(fixture: Fixture, router: Router, overrides: list[str], values: dict[str, str], store: Path,
           timeout: float = 600) -> Replayed:
    """ehrbench's main job on the fixture's tasks with every model call answered by the fixture's script: the real
    clients, the session's Ray cluster (`values` holds `address`), a fresh MLflow store in `store`."""
    import os
    import subprocess
    import sys

    provider = fixture.provider(router).start()
    try:
        args = placeholders(overrides, {**values, "url": provider.url})
        out = subprocess.run([sys.executable, "-m", "ehrbench", *args, f"tracking.root={store}",
                              f"runtime.address={values['address']}", f"hydra.run.dir={store / 'hydra'}"],
                             cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
    finally:
        provider.stop()
    if out.returncode != 0:
        raise AssertionError(f"ehrbench exited {out.returncode}: {out.stderr[-3000:]}")
    from ehrbench.runtime.checkpoint import TrialStore

    [folder] = (store / "runs").iterdir()
    records = TrialStore(folder).load()
    scores: dict[str, list] = {}
    for r in sorted((r for r in records if r.final and r.valid), key=lambda r: (r.task_key, r.trial)):
        scores.setdefault(r.task_key, []).append(r.reward)
    return Replayed(by_pair(provider.requests), scores, records, out.stderr)
