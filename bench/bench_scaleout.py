"""Scale-out: the same run on 1, 2 and 4 Ray worker nodes of this machine (plus a head that runs no trials).

    make bench-scaleout
    python bench/bench_scaleout.py --nodes 1 2 4 --latency 1.0 --concurrency 512

Each cluster is started as an operator would (tests/multinode.py: `jobs/start-ray-head.sh`, then
`jobs/start-ray-worker.sh --address=...` per node, each with `--num-cpus` and the roles `ehrbench_trials` and
`ehrbench_data`), and `bench/bench_throughput.py --address` runs EHR-ChatQA's reference agent with a 1 s scripted
model and user on it (`runtime.placement=roles`): trials in flight, calls/s achieved against the ideal
(in flight / latency), and the harness's own cost per trial with zero latency. Every node shares this machine's
cores, memory and loopback network, so the figures show what spreading costs the harness, not what more machines
would add (docs/clusters.md).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    from multinode import MultiNodeCluster, cluster_env

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--cpus-per-node", type=int, default=1)
    ap.add_argument("--benchmark", default="ehrchatqa")
    args = ap.parse_args()
    rows = []
    for n in args.nodes:
        scratch = Path(tempfile.mkdtemp(prefix="ehrb-so-"))
        cluster = MultiNodeCluster(scratch, cluster_env(scratch))
        try:
            cluster.start_head()
            roles = {"ehrbench_trials": 1000, "ehrbench_data": 1000, "ehrbench_index": 1000, "ehrbench_users": 1000}
            cluster.add_nodes({f"w{i}": roles for i in range(n)}, args.cpus_per_node)
            out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_throughput.py"), "--address",
                                  cluster.address, "--placement", "roles", "--benchmark", args.benchmark,
                                  "--latency", str(args.latency), "--concurrency", str(args.concurrency),
                                  "--waves", str(args.waves), "--zero-latency-trials", "440"],
                                 capture_output=True, text=True, env=cluster.env, cwd=ROOT, timeout=3600)
        finally:
            cluster.stop()
        text = out.stdout
        cost = re.search(r"= ([\d.]+) ms of the machine per trial", text)
        line = re.search(rf"^\s*{args.concurrency}\s+(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)%",
                         text, re.M)
        if out.returncode != 0 or not (cost and line):
            print(f"{n} nodes: failed\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
            continue
        rows.append((n, args.concurrency, float(line.group(4)), int(line.group(3)), float(line.group(5)),
                     float(cost.group(1))))
        print(f"{n} nodes done: {line.group(0).strip()}", flush=True)
    print(f"\n{args.benchmark}, scripted model and user at {args.latency:g} s per call, {args.concurrency} trials in "
          f"flight, {os.cpu_count()} cores shared by every node")
    print(f"{'nodes':>5} {'in flight':>9} {'calls/s':>8} {'ideal':>6} {'of ideal':>9} {'ms/trial (harness)':>19}")
    for n, c, calls, ideal, pct, cost in rows:
        print(f"{n:>5} {c:>9} {calls:>8.1f} {ideal:>6} {pct:>8.1f}% {cost:>19.1f}")


if __name__ == "__main__":
    main()
