"""The code sandbox's cost: starting its host, and the harness time per code cell (EHRAgent's target: < 50 ms).

    make bench-sandbox            # or: python bench/bench_sandbox.py --cells 200

Per cell: a trivial cell (`answer = 1`), one that calls a harness-served tool once, and one that builds a pandas
DataFrame, run one after another; and 64 trivial cells at once (cells of many trials). Times are wall times seen by
the caller, so they include the fork, the limits, the socket round trips and the cleanup of the cell's folder.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from ehrbench.agents.code_sandbox import CodeSandbox


async def main(cells: int) -> None:
    box = CodeSandbox(preload=("pandas",))
    t = time.perf_counter()
    await box.run("answer = 1")
    print(f"host start (python, pandas import, first cell): {1000 * (time.perf_counter() - t):,.0f} ms; "
          f"network: {box.network}")

    async def serve(tool, args):
        return [[1, "a"]]

    for name, code, kwargs in (
            ("trivial cell", "answer = 1", {}),
            ("one harness tool call", "answer = SQLInterpreter('select 1')", {"tools": "bench_tools",
                                                                               "on_tool": serve}),
            ("pandas DataFrame", "import pandas as pd\nanswer = len(pd.DataFrame({'a': range(100)}))", {})):
        times = []
        for _ in range(cells):
            t = time.perf_counter()
            r = await box.run(code, **kwargs)
            times.append(1000 * (time.perf_counter() - t))
            assert r.ended == "ok", r
        times.sort()
        print(f"{name:<24} p50 {statistics.median(times):6.1f} ms   p95 {times[int(0.95 * len(times))]:6.1f} ms")
    t = time.perf_counter()
    results = await asyncio.gather(*(box.run("answer = 1") for _ in range(64)))
    assert all(r.ended == "ok" for r in results)
    print(f"64 trivial cells at once: {1000 * (time.perf_counter() - t):,.0f} ms in all, "
          f"{1000 * (time.perf_counter() - t) / 64:.1f} ms per cell")
    await box.close()


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))          # bench_tools, bound into the cells
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=200)
    asyncio.run(main(ap.parse_args().cells))
