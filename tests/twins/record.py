"""Record a twin fixture: the authors' harness on ehrbench's world, every model call answered by the recording fake
provider from a scenario's script (docs/twins.md).

    python -m tests.twins.record ehrchatqa clean --original /path/EHR-ChatQA --python /path/venv/bin/python \\
        --repository glee4810/EHR-ChatQA --commit 5696da8... -- run.py --env all --task_type all --model gpt-4o ...

It builds the benchmark's databases from the synthetic world (seed 0, `data.dictionary=used`, as the tests do),
copies the authors' checkout (never into this project) to a working folder, writes the tasks and database files
there in the layout that harness reads, starts the provider, runs the given command in the working folder with its
clients routed to the provider by environment variables, and writes
`tests/twins/fixtures/<benchmark>_<scenario>.json.gz`:
the tasks, the script, the original's normalised requests per task and role, its scores and the provenance (the
repository, the commit, the interpreter's `pip freeze`, the command and the variables set).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from .kit import FIXTURES, Difference, Fixture, by_pair, placeholders

# the variables that route each client the authors' harnesses use to the provider ({url}: its address)
ROUTES = {"OPENAI_API_BASE": "{url}/v1", "OPENAI_BASE_URL": "{url}/v1", "OPENAI_API_KEY": "twin-key",
          "GEMINI_API_BASE": "{url}", "GEMINI_API_KEY": "twin-key", "GOOGLE_API_KEY": "twin-key",
          "TAVILY_API_KEY": "twin-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
          "PYTHONHASHSEED": "0"}      # a set's order (the original's value_substring_search) the same every recording


def database_digest(path: Path) -> str:
    """What a database holds (its DDL and every row, in order), not how its file is laid out."""
    h = hashlib.sha256()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for line in con.iterdump():
            h.update(line.encode())
    finally:
        con.close()
    return h.hexdigest()[:16]


def build_databases(db_ids, root: Path) -> dict[str, Path]:
    from ehrbench.schemas import WorldSpec, build_database

    return {db: build_database(db, WorldSpec(seed=0, dictionary="used"), root) for db in db_ids}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark")
    parser.add_argument("scenario")
    parser.add_argument("--original", required=True, help="the authors' checkout (copied, never changed)")
    parser.add_argument("--python", required=True, help="the interpreter of the original's own venv")
    parser.add_argument("--repository", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--work", default=None, help="working folder (default: a new one under /tmp)")
    parser.add_argument("--note", action="append", default=[], help="a provenance note (repeatable)")
    parser.add_argument("--timeout", type=float, default=1800)
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:cut]), argv[cut + 1:]    # after --: the original's command
    twin = importlib.import_module(f"tests.twins.{args.benchmark}")
    work = Path(args.work or f"/tmp/twin-{args.benchmark}-{args.scenario}")
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(args.original, work, ignore=shutil.ignore_patterns(".git", "results", "faiss_index_*"))
    tasks = twin.pick_tasks()
    db_of = getattr(twin, "db_of", lambda task: task["db_id"])
    databases = build_databases(sorted({db_of(t) for t in tasks}), work.parent / "twin-gen")
    fixture = Fixture(args.benchmark, args.scenario, {}, tasks, twin.script(args.scenario, tasks), {}, {})
    provider = fixture.provider(twin.router(tasks)).start()
    twin.export(work, tasks, databases, provider.url)
    log = (work / "twin-requests.log").open("w")
    provider.on_request = lambda seen: (log.write(f"{seen.key} {seen.path}\n"), log.flush())
    env = {**os.environ, **{k: v.format(url=provider.url) for k, v in ROUTES.items()},
           **{k: v.format(work=work) for k, v in getattr(twin, "ENVIRONMENT", {}).items()}}
    # one run of the command, or one per item of the twin's `runs` (a harness that reads one database per run),
    # each with its {placeholders} filled and its files put in place first
    runs, outputs, exit_codes = getattr(twin, "runs", lambda tasks: [{}])(tasks), [], []
    try:
        for values in runs:
            if values:
                twin.prepare(work, values, databases)
            run = subprocess.run([args.python, *placeholders(command, values)], cwd=work, env=env,
                                 timeout=args.timeout, text=True, capture_output=True)
            outputs.append(run.stdout + "\n--- stderr ---\n" + run.stderr)
            exit_codes.append(run.returncode)
    finally:
        provider.stop()
        log.close()
    (work / "twin-stdout.txt").write_text("\n=== next run ===\n".join(outputs))
    freeze = subprocess.run([args.python, "-m", "pip", "freeze"], capture_output=True, text=True).stdout.split()
    version = subprocess.run([args.python, "--version"], capture_output=True, text=True).stdout.strip()
    fixture.provenance = {
        "repository": args.repository, "commit": args.commit, "python": version, "dependencies": freeze,
        "command": command, "runs": runs, "environment": {**ROUTES, **getattr(twin, "ENVIRONMENT", {})},
        "exit_code": max(exit_codes),
        "recorded": datetime.date.today().isoformat(), "notes": args.note,
        "world": {"seed": 0, "scale": 1.0, "dictionary": "used",
                  "databases": {db: database_digest(p) for db, p in databases.items()}}}
    fixture.requests = by_pair(provider.requests)
    fixture.scores = twin.original_scores(work, args.python)
    fixture.ehrbench = {"overrides": twin.EHRBENCH_OVERRIDES[args.scenario]}
    fixture.differences = [Difference(**d) for d in twin.DIFFERENCES]
    out = FIXTURES / f"{args.benchmark}_{args.scenario}.json.gz"
    FIXTURES.mkdir(exist_ok=True)
    fixture.save(out)
    unknown = [s.key for s in provider.requests if s.key[1] == "unknown"]
    print(f"{out}: {sum(len(r) for t in fixture.requests.values() for r in t.values())} requests of "
          f"{len(fixture.requests)} tasks, scores {fixture.scores}; the original exited {exit_codes} "
          f"(its output: {work / 'twin-stdout.txt'}); requests of no known role: {len(unknown)}")
    return 0 if not any(exit_codes) else 1


if __name__ == "__main__":
    sys.exit(main())
