"""Model-written code runs in a separate process within its limits: a runaway loop, a 10 GB allocation, a flood of
output, a sleep past the wall limit each end that cell with an observation and leave the worker and the next cell
untouched; the cell sees no API keys, cannot write outside its folder, open sockets or start processes."""
import asyncio
import os
import signal
from pathlib import Path

import pytest

from ehrbench.agents.code_sandbox import CellLimits, CodeSandbox
from ehrbench.trial import InfrastructureError

ROOT = Path(__file__).resolve().parents[1]
FAST = CellLimits(cpu_s=2, wall_s=6, memory_mb=512, output_chars=1000)


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def sandbox(loop, tmp_path_factory):
    box = CodeSandbox(preload=("pandas",), scratch_root=tmp_path_factory.mktemp("cells"))
    yield box
    loop.run_until_complete(box.close())


def run(loop, sandbox, code, **kw):
    return loop.run_until_complete(sandbox.run(code, limits=kw.pop("limits", FAST), **kw))


def test_a_cell_returns_its_answer_and_what_it_printed(loop, sandbox):
    r = run(loop, sandbox, "import pandas as pd\nprint('rows', len(pd.DataFrame({'a': [1, 2]})))\nanswer = 6 * 7")
    assert (r.ended, r.result, r.stdout) == ("ok", "42", "rows 2\n")


def test_an_error_names_its_type_message_and_line(loop, sandbox):
    r = run(loop, sandbox, "x = 1\ny = x / 0\n")
    assert r.ended == "error" and r.error == {"type": "ZeroDivisionError", "message": "division by zero", "line": 2}


def test_tools_served_by_the_harness_are_awaited_and_recorded(loop, sandbox):
    async def serve(tool, args):
        if args[0] == "bad":
            raise ValueError("no such table: bad")
        return [[1, "a"], [2, "b"]]

    r = run(loop, sandbox, "rows = SQLInterpreter('select *')\nanswer = [r[1] for r in rows]\n"
            "try:\n    SQLInterpreter('bad')\nexcept RuntimeError as e:\n    print(e)",
            tools="tests.sandbox_tools", context={"now": "2105-12-31 23:59:00"}, on_tool=serve)
    assert (r.ended, r.result, r.stdout) == ("ok", "['a', 'b']", "no such table: bad\n")
    assert [c["args"] for c in r.tool_calls] == [["select *"], ["bad"]]
    assert run(loop, sandbox, "answer = NOW", tools="tests.sandbox_tools",
               context={"now": "2105-12-31 23:59:00"}).result == "2105-12-31 23:59:00"


def test_a_runaway_loop_ends_at_its_cpu_limit(loop, sandbox):
    r = run(loop, sandbox, "while True:\n    pass")
    assert r.ended == "cpu_limit" and r.seconds < FAST.wall_s


def test_time_the_harness_spends_serving_tools_is_not_the_cell_s_but_has_a_ceiling(loop, sandbox):
    """Many cells reading one database queue at it: that wait is the harness's, so a cell whose tool call took
    longer than its wall limit still finishes; a cell that keeps the harness busy past `tool_wall_factor` x wall_s
    is stopped all the same."""
    async def slow(tool, args):
        await asyncio.sleep(2.5)
        return [[1]]
    ok = run(loop, sandbox, "answer = SQLInterpreter('select 1')", tools="tests.sandbox_tools", on_tool=slow,
             limits=CellLimits(cpu_s=2, wall_s=1.5))
    assert ok.ended == "ok" and ok.result == "[[1]]" and ok.seconds > 2.5
    looping = run(loop, sandbox, "while True:\n    SQLInterpreter('select 1')", tools="tests.sandbox_tools",
                  on_tool=slow, limits=CellLimits(cpu_s=2, wall_s=1.0, tool_wall_factor=2.0))
    assert looping.ended == "wall_limit" and looping.seconds < 8


def test_a_sleeping_cell_ends_at_its_wall_limit(loop, sandbox):
    r = run(loop, sandbox, "import time\ntime.sleep(60)", limits=CellLimits(cpu_s=2, wall_s=1.5))
    assert r.ended == "wall_limit" and r.seconds < 10


def test_a_10_gb_allocation_is_a_memory_error_not_a_dead_worker(loop, sandbox):
    r = run(loop, sandbox, "x = bytearray(10 * 1024 ** 3)")
    assert r.ended == "memory" and r.error["type"] == "MemoryError"
    assert run(loop, sandbox, "answer = 1").result == "1"            # the next cell runs as usual


def test_output_is_bounded(loop, sandbox):
    r = run(loop, sandbox, "for i in range(100000):\n    print('x' * 100)\nanswer = 'done'")
    assert r.result == "done" and len(r.stdout) == FAST.output_chars and r.stdout_dropped > 9_000_000


def test_the_cell_sees_no_api_keys(loop, sandbox):
    assert os.environ.get("GEMINI_API_KEY")                          # the worker has one (conftest)
    r = run(loop, sandbox, "import os\nanswer = sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k)")
    assert r.result == "[]"


@pytest.mark.parametrize("code, refused", [
    ("open('/tmp/ehrbench-escape.txt', 'w').write('x')", "files can be written only in the cell's folder"),
    ("import os\nos.remove('/etc/hostname')", "outside the cell's folder"),
    ("import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)", "not allowed in the sandbox"),
    ("import subprocess\nsubprocess.run(['true'])", "not allowed in the sandbox: subprocess.Popen"),
    ("import os\nos.fork()", "not allowed in the sandbox: os.fork"),
    ("import ctypes\nctypes.CDLL(None)", "not allowed in the sandbox"),
    ("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (1000, 1000))", "not allowed in the sandbox"),
    ("import ctypes\nctypes.pythonapi.system(b'touch /tmp/ehrbench-escape.txt')", "not allowed in the sandbox"),
    ("from pathlib import Path\nPath('/tmp/ehrbench-escape.txt').write_text('x')", "only in the cell's folder"),
    ("import os\nos.open('/tmp/ehrbench-escape.txt', os.O_RDONLY | os.O_CREAT)", "only in the cell's folder"),
    ("import os\nos.open('escape.txt', os.O_WRONLY | os.O_CREAT, dir_fd=os.open(os.path.dirname(os.__file__), "
     "os.O_RDONLY))", "needs an absolute path"),
    (f"open('/proc/{os.getpid()}/environ').read()", "is not allowed in the sandbox"),      # the worker's keys
    (f"open({str(ROOT / 'data' / 'tasks' / 'ehragent' / 'mimic_iii.json')!r}).read()", "is not allowed"),  # answers
    ("import sqlite3\nsqlite3.connect('/tmp/ehrbench-escape.sqlite')", "only in-memory databases"),
])
def test_writes_outside_its_folder_sockets_and_processes_are_refused(loop, sandbox, code, refused):
    r = run(loop, sandbox, code)
    assert r.ended == "error" and r.error["type"] == "PermissionError" and refused in r.error["message"]
    assert not os.path.exists("/tmp/ehrbench-escape.txt") and not os.path.exists("/tmp/ehrbench-escape.sqlite")


def test_a_cell_may_write_in_its_own_folder_read_the_standard_library_and_use_sqlite_in_memory(loop, sandbox):
    r = run(loop, sandbox, "open('notes.txt', 'w').write('hello')\nanswer = open('notes.txt').read()")
    assert r.result == "hello"
    r = run(loop, sandbox, "import json, statistics, sqlite3\nanswer = sqlite3.connect(':memory:').execute("
            "'select 2 + 2').fetchone()[0]")
    assert r.result == "4"


def test_cells_run_at_once_and_apart(loop, sandbox):
    async def many():
        return await asyncio.gather(*(sandbox.run(f"import time\ntime.sleep(0.5)\nx = {i}\nanswer = x * 2",
                                                  limits=FAST) for i in range(8)))
    results = loop.run_until_complete(many())
    assert [r.result for r in results] == [str(2 * i) for i in range(8)]
    assert max(r.seconds for r in results) < 4                      # concurrently, not 8 x 0.5 s in a row
    assert run(loop, sandbox, "answer = 'x' in globals()").result == "False"   # no state between cells


def test_a_cell_lost_with_its_host_costs_a_retry_and_the_host_is_started_again(loop, tmp_path):
    box = CodeSandbox(preload=(), scratch_root=tmp_path / "cells")

    async def scenario():
        first = await box.run("answer = 1", limits=FAST)
        cell = asyncio.ensure_future(box.run("import time\ntime.sleep(5)\nanswer = 2", limits=FAST))
        await asyncio.sleep(0.5)
        [waiters] = box._pending.values()
        child = (await waiters["started"])["pid"]
        os.killpg(box._host.pid, signal.SIGKILL)                   # the host first, so nobody reports the cell's end
        os.killpg(child, signal.SIGKILL)
        with pytest.raises(InfrastructureError, match="host died"):
            await cell
        await box._host.wait()
        again = await box.run("answer = 3", limits=FAST)           # a new host
        await box.close()
        return first.result, again.result
    assert loop.run_until_complete(scenario()) == ("1", "3")
