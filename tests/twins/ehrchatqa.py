"""EHR-ChatQA's twin: how its requests are told apart, its scenarios' scripts, the layout its authors' harness reads
(glee4810/EHR-ChatQA: `src/envs/<db>/<db>.sqlite`, `src/envs/<db>/eval_<flow>.jsonl` as one JSON array, run from the
repository's root) and where it writes its scores (`results/*.jsonl`, one `EnvRunResult` per attempt).

The scripts are written from the tasks (their gold SQL and answers), never from what a harness answered, so the same
script plays both harnesses. Every task's user opens with a sentence naming the task (its marker for the agent's
requests; the instruction marks the user's, verifier's, reflection's and validator's).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .kit import Router, has_tools, is_embedding, system_text

TASK_DIR = Path(__file__).resolve().parents[2] / "data" / "tasks" / "ehrchatqa"
CELLS = [(db, flow) for db in ("mimic_iv_star", "eicu_star") for flow in ("incre", "adapt")]
# a table, a text column and a value each tool is shown searching, per database
EXPLORE = {"mimic_iv_star": ("hospitaladmissions", "diagnosiscodes", "description", "hyper", "labtesttypes",
                             "itemname", "glucose"),
           "eicu_star": ("icupatient", "lab", "lab_name", "gluc", "lab", "lab_name", "glucose")}
# how ehrbench runs the same tasks as each recording ran the original: the agent on gpt-4o; the user and the
# validator on gpt-4o (clean, failures: the original's `--user_model gpt-4o --validation_model gpt-4o`) or on the
# paper's Gemini models through google-genai (edge: `--user_model gemini/gemini-2.0-flash --validation_model
# gemini/gemini-2.5-flash`, litellm's Gemini route), so both wire formats are covered
COMMON = ["benchmark=ehrchatqa", "benchmark.task_dir={task_dir}", "trials=1", "model=gpt-4o", "model.base_url={url}/v1",
          "data.embedder.provider=openai", "data.embedder.base_url={url}/v1", "data.dictionary=used"]
OPENAI_USER = ["user=gemini-2.0-flash", "model@user.model=gpt-4o", "user.model.base_url={url}/v1",
               "model@validator.model=gpt-4o", "validator.model.base_url={url}/v1"]
GEMINI_USER = ["user=gemini-2.0-flash", "+user.model.base_url={url}", "+validator.model.base_url={url}"]
GEMINI_AGENT = [o for o in COMMON if not o.startswith("model")] + ["model=gemini-2.5-flash", "+model.base_url={url}"]
EHRBENCH_OVERRIDES = {"clean": COMMON + OPENAI_USER, "edge": COMMON + GEMINI_USER, "failures": COMMON + OPENAI_USER,
                      "gemini": GEMINI_AGENT + GEMINI_USER}
# the rows of docs/benchmarks/ehrchatqa.md's "Differences from the original" the twins see
DIFFERENCES = [{"row": "value_substring_search lists its values in the order SQLite finds them; the original's "
                       "come out of a Python set, in an order that changes with the process's hash seed",
                "role": "agent", "field": "messages.*.content", "kind": "unordered_list"}]
NO_ERROR = json.dumps({"explanation": "The user followed the rules.", "broken_rule": "", "evidence": "",
                       "result": "no_error"})
USER_ERROR = json.dumps({"explanation": "The user gave away every goal in the first turn.",
                         "broken_rule": "Do not reveal all your goals at once.", "evidence": "the opening",
                         "result": "user_error"})


def role_of(path: str, body: dict) -> str:
    system = system_text(path, body)
    if is_embedding(path):
        return "embedder"
    if has_tools(body):
        return "agent"
    for role, opening in (("user", "Your task is to simulate a user"), ("verifier", "your goal is to verify"),
                          ("reflection", "You need to generate a Reflection"),
                          ("validator", "Your task is to determine whether [USER]")):
        if opening in system:
            return role
    return "unknown"


def key(task: dict) -> str:
    return f"{task['db_id']}/{task['task_type']}/{task['task_id']}"


def opening(task: dict) -> str:
    return f"I need something from the records, case {task['db_id']} {task['task_type']} {task['task_id']}."


def router(tasks: list[dict]) -> Router:
    return Router(roles=[("embedder", lambda p, b: is_embedding(p)), ("agent", lambda p, b: role_of(p, b) == "agent"),
                         *[(r, lambda p, b, r=r: role_of(p, b) == r)
                           for r in ("user", "verifier", "reflection", "validator")]],
                  markers={key(t): [t["instruction"], opening(t)] for t in tasks})


def pick_tasks(per_cell: int = 1) -> list[dict]:
    """The first `per_cell` tasks of each database and flow from the project's shipped task files."""
    out = []
    for db, flow in CELLS:
        out += json.loads((TASK_DIR / db / f"eval_{flow}.jsonl").read_text())[:per_cell]
    return out


def call(name: str, **args) -> dict:
    return {"tool": name, "args": args}


def answer(task: dict) -> str:
    gold = [row[0] for row in task["gold_answer"]]
    text = ", ".join(str(v) for v in gold)
    return f"Here is what I found: <answer>{text}</answer>" if task["task_type"] == "adapt" else \
        f"The query returned {text}."


def explore(task: dict) -> list[dict]:
    table, search_table, column, fragment, sim_table, sim_column, concept = EXPLORE[task["db_id"]]
    return [call("table_search", tool_input=""), call("column_search", table_names=table),
            call("value_substring_search", table=search_table, column=column, value=fragment),
            call("value_similarity_search", table=sim_table, column=sim_column, value=concept, k=5)]


def clean(task: dict) -> dict[str, list[dict]]:
    """The gold path through five tools (web_search left out: the original's needs Tavily), a bad table name, an
    SQL error, the double-check turn and the validator."""
    agent = [*explore(task), call("column_search", table_names="no_such_table"),
             call("sql_execute", query="SELECT nothing FROM nowhere"), call("sql_execute", query=task["gold_sql"]),
             {"text": answer(task)}, {"text": "Yes, I checked it again. " + answer(task)}]
    return {"user": [{"text": opening(task)}, {"text": "Does that cover everything I asked for?"},
                     {"text": "###END###"}],
            "verifier": [{"text": "yes"}, {"text": "yes"}], "agent": agent, "validator": [{"text": NO_ERROR}]}


def edge(task: dict) -> dict[str, list[dict]]:
    """Text beside a call, two calls at once, an unknown tool, a missing and an extra argument, a `:abc` bind
    parameter, `k` as a string; a user reply the filter rejects; the verifier's "no", a reflection, then "yes"."""
    table, search_table, column, fragment, sim_table, sim_column, concept = EXPLORE[task["db_id"]]
    agent = [{"text": "Let me look at the tables first.", "tool": "table_search", "args": {"tool_input": ""}},
             {"calls": [call("column_search", table_names=table), call("table_search", tool_input="")]},
             call("patient_lookup", patient="everyone"), call("sql_execute"),
             call("value_substring_search", table=search_table, column=column, value=fragment, k=5, extra="x"),
             call("sql_execute", query="SELECT :abc"),
             call("value_similarity_search", table=sim_table, column=sim_column, value=concept, k="3"),
             call("sql_execute", query=task["gold_sql"]), {"text": answer(task)},
             {"text": "Yes, it covers everything. " + answer(task)}]
    revised = json.dumps({"reflection": "The reply asked for the answer again too vaguely.",
                          "new_response": "Does your answer cover all the conditions I gave you?"})
    return {"user": [{"text": opening(task)}, {"text": "Just run SELECT * FROM everything for me."},
                     {"text": "ok whatever"}, {"text": "###END###"}],
            "verifier": [{"text": "no"}, {"text": "yes"}, {"text": "yes"}], "reflection": [{"text": revised}],
            "agent": agent, "validator": [{"text": NO_ERROR}]}


CONTEXT_400 = {"status": 400, "message": "This model's maximum context length is 128000 tokens. However, your "
               "messages resulted in 131072 tokens. Please reduce the length of the messages."}


def failures(task: dict) -> dict[str, list[dict]]:
    """Each task meets other failures. MIMIC-IV* IncreQA: a 429 then success, a malformed call, a non-context HTTP 400,
    and the validator rejecting the first attempt (the second is told why). MIMIC-IV* AdaptQA: a reply cut off with
    text, one cut off before any text, a blocked one. eICU* IncreQA: a refusal for the context's size. eICU*
    AdaptQA: an HTTP 200 without choices, then the 30-step limit."""
    table = EXPLORE[task["db_id"]][0]
    done = [{"text": "Does that cover everything I asked for?"}, {"text": "###END###"}]
    if (task["db_id"], task["task_type"]) == ("mimic_iv_star", "incre"):
        attempt = [call("table_search", tool_input=""), call("sql_execute", query=task["gold_sql"]),
                   {"text": answer(task)}, {"text": "Yes. " + answer(task)}]
        return {"agent": [{"status": 429, "headers": {"Retry-After": "1"}, "retry_delay": "1s"},
                          *attempt[:1], {"tool": "column_search", "raw_args": '{"table_names": "demograph'},
                          call("column_search", table_names=table), {"status": 400, "message": "injected 400"},
                          *attempt[1:], *attempt],
                "user": [{"text": opening(task)}, *done, {"text": opening(task)}, *done],
                "verifier": [{"text": "yes"}] * 4, "validator": [{"text": USER_ERROR}, {"text": NO_ERROR}]}
    if (task["db_id"], task["task_type"]) == ("mimic_iv_star", "adapt"):
        return {"agent": [call("table_search", tool_input=""), {"text": "The count so far is", "finish": "length"},
                          {"finish": "length"}, {"finish": "content_filter"}, {"text": answer(task)},
                          {"text": "Yes. " + answer(task)}],
                "user": [{"text": opening(task)}, {"text": "Go on."}, {"text": "Hello?"}, {"text": "Are you there?"},
                         *done],
                "verifier": [{"text": "yes"}] * 5, "validator": [{"text": NO_ERROR}]}
    if (task["db_id"], task["task_type"]) == ("eicu_star", "incre"):
        return {"agent": [call("table_search", tool_input=""), CONTEXT_400],
                "user": [{"text": opening(task)}, {"text": "Hello?"}],
                "verifier": [{"text": "yes"}], "validator": [{"text": NO_ERROR}]}
    return {"agent": [{"empty": True}] + [call("table_search", tool_input="")] * 31,
            "user": [{"text": opening(task)}, {"text": "Hello?"}], "verifier": [{"text": "yes"}],
            "validator": [{"text": NO_ERROR}]}


def gemini(task: dict) -> dict[str, list[dict]]:
    """The agent on Gemini 2.5 Flash (litellm's Gemini route in the original, google-genai here), the user and the
    validator on Gemini too: a call written as a ```tool_call block, two calls at once with a thought signature, a
    written SQL call with parentheses (the original's parser reads no argument), a reply with neither text nor a
    call (the user is sent the empty reply), the gold query and the answer."""
    table = EXPLORE[task["db_id"]][0]
    written = f'Let me look.\n```tool_call\nprint(default_api.column_search(table_names="{table}"))\n```'
    counted = f'```tool_call\nsql_execute(query="SELECT COUNT(*) FROM {table}")\n```'
    agent = [{"text": written},
             {"calls": [call("table_search", tool_input=""), call("column_search", table_names=table)],
              "signature": "dHdpbi1zaWduYXR1cmU="},
             {"text": counted}, {"finish": "STOP"}, call("sql_execute", query=task["gold_sql"]),
             {"text": answer(task)}, {"text": "Yes, I checked it again. " + answer(task)}]
    return {"user": [{"text": opening(task)}, {"text": "Hello?"}, {"text": "Does that cover everything I asked for?"},
                     {"text": "###END###"}],
            "verifier": [{"text": "yes"}] * 3, "agent": agent, "validator": [{"text": NO_ERROR}]}


SCENARIOS = {"clean": clean, "edge": edge, "failures": failures, "gemini": gemini}


def script(scenario: str, tasks: list[dict]) -> dict[str, dict[str, list[dict]]]:
    return {key(t): SCENARIOS[scenario](t) for t in tasks}


def export(out: Path, tasks: list[dict], databases: dict[str, Path], url: str | None = None) -> None:
    """The tasks and ehrbench's database files in the layout the authors' harness reads (its working copy `out`)."""
    for db, path in databases.items():
        folder = out / "src" / "envs" / db
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, folder / f"{db}.sqlite")
        for flow in ("incre", "adapt"):
            (folder / f"eval_{flow}.jsonl").write_text(json.dumps(
                [{k: t[k] for k in ("db_id", "task_id", "task_type", "instruction", "gold_sql", "gold_answer")}
                 for t in tasks if t["db_id"] == db and t["task_type"] == flow], indent=1))


def original_scores(out: Path, python: str | None = None) -> dict[str, list[float | None]]:
    """Each task's rewards, one per trial, as the harness's result files hold them: a trial's last attempt (a
    validator-rejected attempt is written with reward None, then the next)."""
    scores: dict[str, list] = {}
    for f in sorted((out / "results").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            scores.setdefault(f"{r['db_id']}/{r['task_type']}/{r['task_id']}", []).append(r["reward"])
    return {k: [v for v in rewards if v is not None] for k, rewards in scores.items()}
