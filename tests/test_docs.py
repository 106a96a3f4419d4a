"""The docs: the site builds under `mkdocs build --strict` (a broken link or anchor fails), the configuration
reference is generated from the code (every option the schema and the conf files know is on it), the README is
short and links into the site, and every command the docs mark runnable (`<!-- runnable -->` before a bash block)
runs on the offline defaults. A runnable command gets only where things go added (the session's Ray cluster, its
shared data and a temporary MLflow store, the tests' small world dictionary), so the docs never show a command that
does not work."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT

DOCS = ROOT / "docs"
RUNNABLE = "<!-- runnable -->"


def runnable_commands() -> list[tuple[str, str]]:
    """(page, command) for every line of every bash block marked runnable, `\\` continuations joined."""
    found = []
    for page in sorted([*DOCS.rglob("*.md"), ROOT / "README.md"]):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() != RUNNABLE:
                continue
            start = next(j for j in range(i + 1, len(lines)) if lines[j].strip())
            assert lines[start].startswith("```bash"), f"{page.name}:{i + 1}: {RUNNABLE} must come before a bash block"
            end = next(j for j in range(start + 1, len(lines)) if lines[j].startswith("```"))
            block = "\n".join(lines[start + 1:end]).replace("\\\n", " ")
            found += [(str(page.relative_to(ROOT)), c.strip()) for c in block.splitlines()
                      if c.strip() and not c.strip().startswith("#")]
    return found


def test_the_site_builds_with_no_warning_and_the_reference_names_every_option(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "WARNING" not in out.stderr, out.stderr[-3000:]
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    from ehrbench import config

    for section, prefix in ((config.RunOptions, ""), (config.RuntimeOptions, "runtime."), (config.DataOptions, "data."),
                            (config.TrackingOptions, "tracking."), (config.UserOptions, "user."),
                            (config.ValidatorOptions, "validator."), (config.TrialLimits, "benchmark.")):
        for f in dataclasses.fields(section):
            assert f"<code>{prefix}{f.name}</code>" in reference, f"{prefix}{f.name} is not in the reference"
    for conf in sorted((ROOT / "conf" / "benchmark").glob("*.yaml")):
        assert f"benchmark={conf.stem}" in reference
        for key in yaml.safe_load(conf.read_text()):
            if key not in ("name", "defaults"):
                assert f"<code>benchmark.{key}</code>" in reference, f"{conf.name}: {key} is not in the reference"
    for model in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        if model.stem != "scripted":
            assert f"<code>{model.stem}</code>" in reference


def test_a_broken_anchor_fails_the_build(tmp_path):
    """The strict build catches what the docs test relies on it for: a link to a heading that is not there."""
    site = tmp_path / "docs"
    site.mkdir()
    (site / "index.md").write_text("# Home\n\nSee [the runtime](other.md#no-such-heading).\n")
    (site / "other.md").write_text("# Other\n\n## The runtime\n")
    conf = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    conf.update(docs_dir=str(site), site_dir=str(tmp_path / "site"), hooks=[], nav=["index.md", "other.md"])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(conf))
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode != 0 and "no-such-heading" in out.stderr


def test_the_readme_is_short_and_links_into_the_site():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "make run" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()            # CI calls the README's test command
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(set(links)) >= 10
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, missing
    nav = (ROOT / "mkdocs.yml").read_text()
    assert all(link.removeprefix("docs/") in nav for link in links)


def test_the_docs_mark_commands_runnable():
    pages = {page for page, _ in CASES}
    assert len(CASES) >= 4 and {"docs/getting-started.md", "docs/suites.md", "docs/adding-a-benchmark.md"} <= pages


CASES = runnable_commands()


@pytest.mark.parametrize("page,command", CASES, ids=[f"{page}:{i}" for i, (page, _) in enumerate(CASES)])
def test_a_runnable_command_in_the_docs_works_on_the_offline_defaults(page, command, ray_cluster, shared_world,
                                                                      tmp_path):
    assert "ehrbench" in command, f"{page}: {command!r}: the docs tests run ehrbench commands only"
    where = [f"runtime.address={ray_cluster.address}", f"data.root={shared_world / 'gen'}",
             f"data.index_cache={shared_world / 'vi'}", "data.dictionary=used",
             f"tracking.root={tmp_path / 'mlruns'}", f"hydra.run.dir={tmp_path / 'out'}"]
    if "limit_tasks=" not in command:
        where.append("limit_tasks=1")
    python = str(Path(sys.executable))
    line = re.sub(r"(^|\s)(\.venv/bin/python|python)(?=\s)", lambda m: m.group(1) + python, command, count=1)
    out = subprocess.run(["bash", "-c", f"{line} {' '.join(where)}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, f"{page}: {command}\n{(out.stdout + out.stderr)[-3000:]}"
    assert "Traceback" not in out.stderr
    if "dry_run=true" in command:
        assert "estimate" in out.stdout.lower() and "MLflow run" not in out.stdout
    else:
        assert "MLflow run" in out.stdout                                 # a run, scored and logged
