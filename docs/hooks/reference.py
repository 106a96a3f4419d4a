"""MkDocs hook: the configuration reference, generated at build time from the code, so it cannot drift.

`docs/reference.md` holds markers; this hook replaces each with tables read from the sources of truth:
the typed schema in `src/ehrbench/config.py` (every field, its type, default, allowed range and the comment beside
it), the config groups in `conf/` (each choice and its first comment line), every benchmark's options
(`conf/benchmark/<name>.yaml`: key, default, comment) and the models (`conf/model/*.yaml`: provider, price, limits);
and, on each benchmark's page, its request-parameter table (`<!-- reference: sampling:<benchmark> -->`).
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _field_comments(cls) -> dict[str, str]:
    """`name: type = field(...)  # comment` lines of a dataclass's source."""
    out = {}
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+): [^#]*?(?:#\s*(.*))?$", line)
        if m and m.group(2):
            out[m.group(1)] = m.group(2)
    return out


def _rule_text(meta: dict) -> str:
    if not meta:
        return ""
    kind = {int: "integer", float: "number", bool: "true/false", str: "string"}[meta["kind"]]
    parts = [f"one of {', '.join(map(str, meta['choices']))}" if meta["choices"] else kind]
    if meta["low"] is not None:
        parts.append(f">= {meta['low']:g}")
    if meta["above"] is not None:
        parts.append(f"> {meta['above']:g}")
    if meta["nullable"]:
        parts.append("or null")
    return " ".join(parts)


def _default(f) -> str:
    """A field's default as the conf files write it (null, true, 256, spread)."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def schema_table(cls, prefix: str, conf_file: str | None = None) -> str:
    """One section of the typed schema as a table; a field with no comment of its own takes its conf file's."""
    comments = _field_comments(cls)
    written = {k: (v, c) for k, v, c in yaml_options(CONF / conf_file)} if conf_file else {}
    rows = ["| option | default | allowed | what it does |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        value, conf_note = written.get(f.name, (_default(f), ""))     # what a run gets: the conf file's value
        note = comments.get(f.name) or conf_note
        rows.append(f"| `{prefix}{f.name}` | `{_cell(value or _default(f))}` | {_cell(_rule_text(f.metadata))} | "
                    f"{_cell(note)} |")
    doc = inspect.getdoc(cls) or ""
    return f"{doc}\n\n" + "\n".join(rows)


def yaml_options(path: Path) -> list[tuple[str, str, str]]:
    """(key, value as written, comment) for each top-level key of a conf file; a comment continued on the lines
    below (indented `#` lines) is joined to it."""
    out: list[list[str]] = []
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z_][\w-]*):\s*(.*?)\s*(?:#\s?(.*))?$", line)
        if m and m.group(1) not in ("defaults", "hydra"):
            out.append([m.group(1), m.group(2), m.group(3) or ""])
        elif out and re.match(r"^\s+#", line):
            out[-1][2] += " " + line.strip().lstrip("#").strip()
        elif not line.startswith((" ", "#", "-")) and line.strip():
            out.append(["", "", ""])          # a key with a nested block: nothing to continue
    return [(k, v, c) for k, v, c in out if k]


def first_comment(path: Path) -> str:
    lines = [line.lstrip("# ").strip() for line in path.read_text().splitlines()[:3] if line.startswith("#")]
    return " ".join(lines)


def options_table(path: Path, prefix: str, skip: tuple = ()) -> str:
    rows = ["| option | default | what it does |", "| --- | --- | --- |"]
    for key, value, comment in yaml_options(path):
        if key not in skip:
            rows.append(f"| `{prefix}{key}` | `{_cell(value)}` | {_cell(comment)} |")
    return "\n".join(rows)


def groups() -> str:
    out = []
    for group in sorted(p for p in CONF.iterdir() if p.is_dir()):
        out.append(f"### `{group.name}=`\n\n| choice | what it is |\n| --- | --- |")
        out += [f"| `{c.stem}` | {_cell(first_comment(c))} |" for c in sorted(group.glob("*.yaml"))]
        out.append("")
    return "\n".join(out)


def benchmarks() -> str:
    out = []
    for path in sorted((CONF / "benchmark").glob("*.yaml")):
        out.append(f"### `benchmark={path.stem}`\n\n{first_comment(path)}\n\n"
                   f"{options_table(path, 'benchmark.', skip=('name',))}\n")
    return "\n".join(out)


def models() -> str:
    rows = ["| `model=` | provider | model id | $ / 1M input, output, cached | limits (cluster-wide) | key |",
            "| --- | --- | --- | --- | --- | --- |"]
    for path in sorted((CONF / "model").glob("*.yaml")):
        m = yaml.safe_load(path.read_text()) or {}
        if m.get("provider") == "scripted":
            continue
        price = m.get("price") or {}
        limits = m.get("limits") or {}
        if m.get("provider") == "gemini":
            m.setdefault("api_key_env", "GEMINI_API_KEY")
        rows.append(f"| `{path.stem}` | {m.get('provider', '')} | `{m.get('model', '') or ''}` | "
                    f"{price.get('input', '')}, {price.get('output', '')}, {price.get('cached', '')} | "
                    f"{limits.get('concurrency')} at once, {limits.get('per_minute') or 'no limit'} / min | "
                    f"{m.get('api_key_env') or ''} |")
    return "\n".join(rows)


def sections() -> dict[str, str]:
    from ehrbench import config

    return {
        "run": schema_table(config.RunOptions, "", "config.yaml") + "\n\n" + options_table(
            CONF / "config.yaml", "", skip=tuple(f.name for f in dataclasses.fields(config.RunOptions))),
        "limits": schema_table(config.TrialLimits, "benchmark."),
        "runtime": schema_table(config.RuntimeOptions, "runtime.", "runtime/local.yaml"),
        "data": schema_table(config.DataOptions, "data.", "data/default.yaml"),
        "tracking": schema_table(config.TrackingOptions, "tracking.", "tracking/local.yaml"),
        "user": schema_table(config.UserOptions, "user.", "user/gemini-2.0-flash.yaml"),
        "validator": schema_table(config.ValidatorOptions, "validator.", "validator/auto.yaml"),
        "suite": options_table(CONF / "suite" / "all.yaml", "suite.", skip=("name", "benchmarks")) + "\n| `suite.benchmarks` | "
                 "the five | each entry: a `conf/benchmark` choice and the overrides its runs take, e.g. "
                 "`suite.benchmarks.clinsql=['grader=gpt-5-chat']` |",
        "model": options_table(CONF / "model" / "gpt-4o.yaml", "model.", skip=("name",)),
        "grader": "\n".join(f"| `grader={c.stem}` | {_cell(first_comment(c))} |" for c in
                            sorted((CONF / "grader").glob("*.yaml"))),
        "groups": groups(),
        "benchmarks": benchmarks(),
        "models": models(),
    }


def benchmark_table(kind: str, name: str) -> str:
    """A benchmark's own table, from its class: `sampling` (what each role sends, `sampling.py`), `failures` (how a
    failed turn ends, `failures.py`)."""
    from ehrbench import benchmarks

    cls = benchmarks.benchmark_class(name)
    tables = {"sampling": cls.sampling_table, "failures": cls.failure_table}
    if tables.get(kind) is None:
        raise ValueError(f"benchmark {name!r} declares no {kind} table")
    return tables[kind].markdown()


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- reference:" not in markdown:
        return markdown
    generated = sections() if re.search(r"<!-- reference: \w+ -->", markdown) else {}

    def fill(m: re.Match) -> str:
        name = m.group(1)
        if ":" in name:
            return benchmark_table(*name.split(":", 1))
        if name not in generated:
            raise ValueError(f"{page.file.src_uri}: no generated section {name!r} (known: {sorted(generated)})")
        return generated[name]
    return re.sub(r"<!-- reference: ([\w:]+) -->", fill, markdown)
