"""The layers import downward only (read from the source, lazy imports included): the model layer (`llm/`) and
the trial core (`trial.py`, `benchmark.py`, `episode.py`) never reach up into the runtime, which supplies its
cluster-wide limiters and spending caps to them instead; the report types have one home (`reports.py`) that the
scoreboard and the leaderboard read without the benchmark seam."""
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
        assert {"benchmark.py", "tasks.py", "tools.py", "scoring.py"} <= files, package.name
        assert "authoring.py" in files or (package / "authoring" / "__init__.py").exists(), package.name
        assert not files & {"scorer.py", "judge.py", "grading.py", "taskgen"}, package.name
