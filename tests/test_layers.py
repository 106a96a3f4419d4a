"""The layers import downward only (read from the source, lazy imports included), as docs/concepts.md draws them:
every module has its layer, and none imports a layer above its own. The model layer (`llm/`) and the trial core
never reach up into the runtime, which supplies its cluster-wide limiters and spending caps to them instead; the
report types have one home (`reports.py`) that the scoreboard and the leaderboard read without the benchmark seam."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ehrbench"


def imported(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it, as an absolute `ehrbench...` name."""
    package = ["ehrbench", *path.relative_to(SRC).parent.parts]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            names.add(module)
            names |= {f"{module}.{a.name}" for a in node.names}
    return names


# top to bottom, as docs/concepts.md draws them: a folder, or one file (a file named here wins over its folder)
LAYERS = [
    ("commands", ["__main__.py", "suite.py", "rescore.py", "report.py"]),
    ("runtime", ["runtime", "tracking"]),
    ("benchmarks", ["benchmarks/agentehr", "benchmarks/clinsql", "benchmarks/ehragent", "benchmarks/ehrchatqa",
                    "benchmarks/physassist"]),
    ("seam", ["benchmark.py", "episode.py", "benchmarks/__init__.py", "config.py", "data_use.py", "sampling.py",
              "failures.py",
              "reports.py",
              "scoreboard.py", "leaderboard.py", "stats.py", "estimate.py", "tracking/plots.py", "runtime/hosts.py"]),
    ("parts", ["agents", "users", "judges"]),
    ("llm", ["llm"]),
    ("base", ["trial.py", "errors.py", "metrics.py", "db", "retrieval", "world", "schemas", "data"]),
]


def layer(rel: str) -> int | None:
    """The layer of a file (path relative to src/ehrbench): the longest entry that names it or a folder above it."""
    found = [(len(entry), i) for i, (_, entries) in enumerate(LAYERS) for entry in entries
             if rel == entry or rel.startswith(entry + "/")]
    return max(found)[1] if found else None


def module_file(module: str) -> str | None:
    """`ehrbench.a.b.C` -> the file it names or lives in (`a/b.py`, or `a/b/__init__.py`)."""
    parts = module.split(".")[1:]
    for k in range(len(parts), 0, -1):
        base = SRC.joinpath(*parts[:k])
        if base.with_suffix(".py").exists():
            return "/".join(parts[:k]) + ".py"
        if (base / "__init__.py").exists():
            return "/".join(parts[:k]) + "/__init__.py"
    return None


def test_every_module_has_a_layer_and_imports_only_its_own_and_those_below():
    upward = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        if rel == "__init__.py":
            continue
        mine = layer(rel)
        assert mine is not None, f"{rel} is in no layer: add it to LAYERS here and to the drawing in docs/concepts.md"
        for module in imported(path):
            target = module_file(module) if module.startswith("ehrbench.") else None
            theirs = layer(target) if target else None
            if theirs is not None and theirs < mine:
                upward.append(f"{rel} ({LAYERS[mine][0]}) imports {module} ({LAYERS[theirs][0]})")
    assert not upward, "\n".join(sorted(set(upward)))


def test_the_layer_check_sees_an_upward_import():
    assert layer("judges/validator.py") > layer("episode.py")     # so validator -> episode would be reported
    assert module_file("ehrbench.episode.USER_ERROR") == "episode.py"
    assert module_file("ehrbench.runtime.hosts.InProcess") == "runtime/hosts.py" and \
        layer("runtime/hosts.py") > layer("runtime/actors.py")


def test_the_model_layer_and_the_trial_core_never_import_the_runtime():
    lower = [*sorted((SRC / "llm").glob("*.py")), SRC / "trial.py", SRC / "benchmark.py", SRC / "episode.py"]
    for path in lower:
        upward = {m for m in imported(path) if m.startswith("ehrbench.runtime")}
        assert not upward, f"{path.relative_to(SRC)} imports {sorted(upward)}"


def test_the_report_types_live_apart_from_the_seam():
    for name in ("reports.py", "scoreboard.py", "leaderboard.py", "stats.py"):
        seam = {m for m in imported(SRC / name) if m == "ehrbench.benchmark" or m.startswith("ehrbench.benchmark.")}
        assert not seam, f"{name} imports the benchmark seam: {sorted(seam)}"


def test_every_benchmark_package_names_its_roles_alike():
    for package in sorted(p for p in (SRC / "benchmarks").iterdir() if (p / "__init__.py").exists()):
        files = {p.name for p in package.iterdir()}
        assert {"benchmark.py", "tasks.py", "tools.py", "scoring.py", "sampling.py", "failures.py"} <= files, \
            package.name
        assert "authoring.py" in files or (package / "authoring" / "__init__.py").exists(), package.name
        assert not files & {"scorer.py", "judge.py", "grading.py", "taskgen"}, package.name
