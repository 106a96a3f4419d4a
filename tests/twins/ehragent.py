"""EHRAgent's twin: how its requests are told apart, its scenarios' scripts, and the files its authors' harness reads
(wshi83/EhrAgent: `ehragent/main.py`, one run per database, with pyautogen 0.2.0 and openai 1.7.2).

What the released code reads, and where this twin puts it (in the harness's working copy, never in this project):
- the question file `--data_path` (a JSON array of {id, template, answer, ...}): `data/<dataset>.json`, the
  project's EHRSQL items unchanged, TREQS's MIMICSQL items as {id: key, template: question_refine, answer};
- the tables and the database, at paths written into `tools/tabtools.py` as `<YOUR_DATASET_PATH>/ehrsql/mimic_iii/`
  (relative paths, so a folder of that very name in the working directory serves them, the code untouched); the
  released LoadDB knows MIMIC-III's table names only, so on eICU and TREQS its scenarios go through
  SQLInterpreter, which reads whichever database lies at that path;
- the model and endpoint, in `ehragent/config.py`'s placeholders, as its README asks a user to fill them (an Azure
  deployment `gpt-4o` at the provider; `api_type` written `azure`: the shipped `"AZURE"` is passed on to
  openai 1.7.2's `create` by pyautogen 0.2.0, whose every chatbot call then fails with a TypeError);
- the scores: the authors' `evaluate.py`, unchanged, run once per question on its log (`logs/<dataset>/4/<id>.txt`).
The original has no TREQS prompts: its main.py loads eICU's for any `--dataset` but mimic_iii, so on TREQS ehrbench
runs with `benchmark.treqs_prompts=eicu` (its own TREQS prompts are the default).

The scripts are written from the tasks (their questions, gold answers and the reference's tool cells), never from
what a harness answered, so one script plays both harnesses.
"""
from __future__ import annotations

import ast
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

from .kit import has_tools, system_text

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = ROOT / "data" / "tasks" / "ehragent"
DATASETS = {"ehrsql_mimic_iii": "mimic_iii", "ehrsql_eicu": "eicu", "treqs": "treqs"}   # db -> its --dataset
FILES = {"ehrsql_mimic_iii": "mimic_iii.json", "ehrsql_eicu": "eicu.json", "treqs": "treqs.jsonl"}
# two questions per database whose gold SQL reads no clock (the original's SQLite reads the real one); on TREQS
# a retrieval and a count
TREQS_COUNT = "ba8fb289f579b54424fe2bbe"
PICKED = {"ehrsql_mimic_iii": ["015efc3065ac97b4a7c66a56", "25512a940e8dbd6f0485b651"],
          "ehrsql_eicu": ["a485417f5e8e074e2ce9833e", "abe6c2c15b05b7aee774fc98"],
          "treqs": ["c0f3c7483ec3a1c622c8dadb", TREQS_COUNT]}
DATA = "<YOUR_DATASET_PATH>"                   # tabtools.py's paths, relative to the working directory
ENVIRONMENT = {"PYTHONPATH": "{work}"}         # the cells' `from tools import tabtools` (the repository's root)
COMMAND = ["ehragent/main.py", "--llm", "<YOUR_OWN_GPT_MODEL_I>", "--dataset", "{dataset}", "--data_path",
           "{data_path}", "--logs_path", "{logs_path}", "--num_questions", "-1", "--seed", "0"]
EHRBENCH_OVERRIDES = {scenario: ["benchmark=ehragent", "benchmark.task_dir={task_dir}", "benchmark.treqs_prompts=eicu",
                                 "trials=1", "model=gpt-4o", "model.base_url={url}/v1", "data.dictionary=used"]
                      for scenario in ("clean", "edge", "failures")}
DIFFERENCES: list[dict] = []


def db_of(item: dict) -> str:
    return "treqs" if "question_refine" in item else f"ehrsql_{item['db_id']}"


def qid(item: dict) -> str:
    return item["key"] if db_of(item) == "treqs" else item["id"]


def question(item: dict) -> str:
    return item["question_refine"] if db_of(item) == "treqs" else item["template"]


def key(item: dict) -> str:
    return f"{db_of(item)}/{qid(item)}"


def role_of(path: str, body: dict) -> str:
    from ehrbench.benchmarks.ehragent.prompts import DEBUGGER_SYSTEM, KNOWLEDGE_SYSTEM

    if has_tools(body):
        return "chatbot"
    return {KNOWLEDGE_SYSTEM: "knowledge", DEBUGGER_SYSTEM: "debugger"}.get(system_text(path, body), "unknown")


def router(tasks: list[dict]):
    """(path, body) -> (task, role): the task is the question asked last in the request's first user message (the
    chatbot's opening lists remembered questions as examples before its own; the helpers name one question)."""
    questions = {key(t): question(t) for t in tasks}

    def route(path: str, body: dict):
        opening = next((m.get("content") or "" for m in body.get("messages") or [] if m.get("role") == "user"), "")
        found = [(opening.rfind(q), len(q), k) for k, q in questions.items() if q in opening]
        return (max(found)[2] if found else None), role_of(path, body)
    return route


def items_of(db: str) -> list[dict]:
    text = (TASK_DIR / FILES[db]).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()] if db == "treqs" else json.loads(text)


def pick_tasks() -> list[dict]:
    out = []
    for db, ids in PICKED.items():
        items = {qid(i): i for i in items_of(db)}
        out += [items[i] for i in ids]
    return out


# --- the scripts -----------------------------------------------------------------------------------------------------
def _gold_sql(item: dict) -> str:
    from ehrbench.benchmarks.ehragent.tasks import load_tasks

    return next(t.gold_sql for t in load_tasks(TASK_DIR / FILES[db_of(item)], db_of(item)) if t.qid == qid(item))


def right_cell(item: dict) -> str:
    """The reference's cell: LoadDB, FilterDB and GetValue on MIMIC-III; the gold SQL through SQLInterpreter on
    eICU and TREQS (the released LoadDB knows neither's tables)."""
    from ehrbench.benchmarks.ehragent.reference import tool_plan

    if db_of(item) == "ehrsql_mimic_iii":
        return tool_plan(db_of(item), item["template"])
    sql = _gold_sql(item)
    return f'rows = SQLInterpreter("{sql}")\nanswer = rows[0][0]' if '"' not in sql else \
        f"rows = SQLInterpreter({sql!r})\nanswer = rows[0][0]"


def cell(code: str, style: str = "indented") -> dict:
    """A python call, its arguments written as GPT-4 wrote them (`indented`: `{\n  "cell": "..."\n}`), on one line
    with a space (`spaced`: `{"cell": "..."}`) or without (`compact`: `{"cell":"..."}`). The original's judge window
    takes the last `"cell": "` as a cell's start and its last `"\n}` as the end: after a `spaced` last call it is
    empty, and a `compact` one is no cell to it at all."""
    separators, indent = {"indented": ((",", ": "), 2), "spaced": ((", ", ": "), None),
                          "compact": ((",", ":"), None)}[style]
    return {"tool": "python", "raw_args": json.dumps({"cell": code}, separators=separators, indent=indent)}


def said(item: dict, ending: str = "\nTERMINATE") -> dict:
    return {"text": f"The answer is {', '.join(item['answer'])}.{ending}"}


def knowledge(item: dict) -> list[dict]:
    return [{"text": f"- The question {qid(item)[:6]} reads the tables linked by their ids."}]


def clean(item: dict) -> dict[str, list[dict]]:
    """A wrong table (an SQL error, diagnosed by the debugger), the right cell, the answer with TERMINATE."""
    return {"knowledge": knowledge(item),
            "chatbot": [cell("rows = SQLInterpreter('select nothing from nowhere')\nanswer = rows"),
                        cell(right_cell(item)), said(item)],
            "debugger": [{"text": "The table nowhere does not exist; use the tables the question names."}]}


EDGE_CELLS = {   # name -> a cell with one kind of error the original's run_code words in its own way
    "syntax error": ("rows = (1,\nanswer = rows", "spaced"),
    "IndentationError": ("if True:\nanswer = 1", "indented"),
    "LoadDB with two arguments": ("db = LoadDB('admissions', 'x')\nanswer = 1", "indented"),
    "an exception without a message": ("assert False\nanswer = 1", "indented"),
    "no answer on the last line": ("rows = 1", "indented"),
}


def edge(item: dict) -> dict[str, list[dict]]:
    """Each error of EDGE_CELLS in turn (each but the last diagnosed by the debugger), a call of an unknown
    function, then the right cell written without spaces (the first question of each database: the whole chat is
    judged) or with (the second: nothing is), and the answer."""
    calls = [cell(code, style) for code, style in EDGE_CELLS.values()]
    style = "compact" if qid(item) == PICKED[db_of(item)][0] else "spaced"
    debugged = [name for name in EDGE_CELLS if name != "no answer on the last line"] + ["unknown function"]
    return {"knowledge": knowledge(item),
            "chatbot": [*calls, {**cell("ls"), "tool": "shell"}, cell(right_cell(item), style), said(item)],
            "debugger": [{"text": f"Reason {i + 1}: {name}."} for i, name in enumerate(debugged)]}


def failures(item: dict) -> dict[str, list[dict]]:
    """The helpers return nothing: the knowledge call twice (the original tries twice, then writes its fallback),
    the debugger twice for the first error; then the first question of each database ends its reply with
    "TERMINATE." (not the proxy's ending: the chat goes on) before a bare TERMINATE, and the second never says
    TERMINATE, up to the proxy's 10 auto-replies."""
    first = qid(item) == PICKED[db_of(item)][0]
    chat = [said(item, " TERMINATE."), {"text": "TERMINATE"}] if first else [said(item, "")] * 10
    return {"knowledge": [{"text": ""}, {"text": ""}],
            "chatbot": [cell("rows = SQLInterpreter('select nothing from nowhere')\nanswer = rows"),
                        cell(right_cell(item)), *chat],
            "debugger": [{"text": ""}, {"text": ""}]}


SCENARIOS = {"clean": clean, "edge": edge, "failures": failures}


def script(scenario: str, tasks: list[dict]) -> dict[str, dict[str, list[dict]]]:
    return {key(t): SCENARIOS[scenario](t) for t in tasks}


# --- the files the authors' harness reads ------------------------------------------------------------------------
def runs(tasks: list[dict]) -> list[dict]:
    """One run of main.py per database, as the README runs it (`--num_questions -1 --seed 0`)."""
    return [{"db": db, "dataset": DATASETS[db], "data_path": f"data/{DATASETS[db]}.json",
             "logs_path": f"logs/{DATASETS[db]}"} for db in DATASETS if any(db_of(t) == db for t in tasks)]


def export(out: Path, tasks: list[dict], databases: dict[str, Path], url: str) -> None:
    """The question files, the log folders and config.py's placeholders filled (the provider as an Azure
    deployment)."""
    (out / "data").mkdir(exist_ok=True)
    for db, dataset in DATASETS.items():
        items = [t if db != "treqs" else {"id": qid(t), "template": question(t), "answer": t["answer"], **t}
                 for t in tasks if db_of(t) == db]
        (out / "data" / f"{dataset}.json").write_text(json.dumps(items, indent=1))
        (out / "logs" / dataset / "4").mkdir(parents=True, exist_ok=True)
    config = out / "ehragent" / "config.py"
    text = config.read_text()
    for placeholder, value in (("<MODEL_NAME>", "gpt-4o"), ("<API_KEY>", "twin-key"), ("<BASE_URL>", url),
                               ("<API_VERSION>", "2023-12-01-preview"), ('"AZURE"', '"azure"')):
        assert placeholder in text, f"config.py has no {placeholder}: another version of the authors' code?"
        text = text.replace(placeholder, value)
    config.write_text(text)


def prepare(out: Path, run: dict, databases: dict[str, Path]) -> None:
    """The run's database where tabtools.py reads it: the SQLite file, and each table as a CSV (as EHRSQL's
    preprocessing wrote them, pandas without an index), also under the one path the released dict spells
    without `ehrsql/` (OUTPUTEVENTS)."""
    import pandas as pd

    folder = out / DATA / "ehrsql" / "mimic_iii"
    for old in (folder, out / DATA / "mimic_iii"):
        shutil.rmtree(old, ignore_errors=True)
        old.mkdir(parents=True)
    shutil.copyfile(databases[run["db"]], folder / "mimic_iii.db")
    con = sqlite3.connect(databases[run["db"]])
    try:
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            frame = pd.read_sql_query(f'SELECT * FROM "{table}"', con)
            frame.to_csv(folder / f"{table.upper()}.csv", index=False)
            if table.upper() == "OUTPUTEVENTS":
                frame.to_csv(out / DATA / "mimic_iii" / "OUTPUTEVENTS.csv", index=False)
    finally:
        con.close()


def original_scores(out: Path, python: str) -> dict[str, list[list[float]]]:
    """Each question's [SR, CR] as the authors' evaluate.py counts its log: it reads `<YOUR_LOGS_PATH>` (listing
    it, then opening `<YOUR_LOGS_PATH>` + the file's name) and the answers at `<YOUR_DATASET_PATH>`, relative to
    where it runs; run once per log in a folder of its own, so each verdict is one question's."""
    scores = {}
    for db, dataset in DATASETS.items():
        for log in sorted((out / "logs" / dataset / "4").glob("*.txt")):
            scratch = out / "evaluate" / dataset / log.stem
            (scratch / "<YOUR_LOGS_PATH>").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, scratch / "<YOUR_LOGS_PATH>" / log.name)
            shutil.copyfile(log, scratch / f"<YOUR_LOGS_PATH>{log.name}")
            shutil.copyfile(out / "data" / f"{dataset}.json", scratch / "<YOUR_DATASET_PATH>")
            run = subprocess.run([python, str(out / "ehragent" / "evaluate.py")], cwd=scratch, text=True,
                                 capture_output=True, check=True)
            stats = ast.literal_eval(run.stdout.strip().splitlines()[-1])
            assert stats["total_num"] == 1, (log, stats)
            scores[f"{db}/{log.stem}"] = [[float(stats["correct"]), 1.0 - stats["unfinished"]]]
    return scores
