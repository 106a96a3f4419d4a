"""At the providers' limits, not below them: how close a run keeps two providers to their rate limits.

    make bench-rate-limits                                  # two fake providers, 60 requests a minute each
    make bench-rate-limits ARGS="--rpm 120 --latency 0.5 --minutes 3"
    make bench-rate-limits ARGS="--suite --rpm 90"          # the five benchmarks x two models, all at once

Two providers on the project's loopback fake server (tests/fake_llm_server.py), each with a latency and a limit of
`--rpm` requests per 60 s window past which it answers 429 with Retry-After: the agent's model (OpenAI protocol) and
the simulated user's (Gemini protocol). One EHR-ChatQA run (tool-calling agent, LLM user, no validator) drives both
through the cluster-wide limiters (`runtime/rate_limits.py`, the model confs' `limits.per_minute` set to the same
figure). Printed per provider: requests answered per minute as the provider counts them (in a sliding 60 s
window, averaged over every second from one window after the start to the end) beside the ideal (the smaller of concurrency / latency and the limit), as a share of the
binding limit, and the 429s the provider sent; and for the run, the trials that lost an attempt (re-submitted or
failed on infrastructure). Targets: >= 95% of the binding limit, no attempt lost to a 429.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fake_llm_server import FakeLLMServer, Reply  # noqa: E402


def steady_rate(times: list[float], window_s: float = 60.0) -> float:
    """Requests per minute as the provider counts them, in a sliding 60 s window, averaged over the steady part of
    the run: every second from one window after the first request to the last request (a limited run comes in
    bursts at each window's turn, so a plain count over an arbitrary span says little)."""
    if len(times) < 10 or times[-1] - times[0] <= window_s:
        return 0.0
    samples, t = [], times[0] + window_s
    while t <= times[-1]:
        samples.append(sum(1 for x in times if t - window_s < x <= t) * 60.0 / window_s)
        t += 1.0
    return sum(samples) / len(samples)


ENV = {**os.environ, "OPENAI_API_KEY": "sk-bench-not-a-secret", "GEMINI_API_KEY": "bench-key", "HF_HUB_OFFLINE": "1"}


def run_command(cmd: list[str], server: FakeLLMServer) -> float:
    """The run's wall time; the fake providers are stopped after it; a failed run ends the bench with its error."""
    started = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=ENV)
    wall = time.monotonic() - started
    server.stop()
    if out.returncode != 0:
        print(out.stderr[-3000:], file=sys.stderr)
        raise SystemExit(out.returncode)
    return wall


def provider_row(server: FakeLLMServer, model: str, ideal: float) -> str:
    """A provider's requests answered, its steady rate, that rate against the ideal, and the 429s it sent."""
    ok = [t for t, mdl, status in server.served if mdl == model and status == 200]
    refused = sum(1 for _, mdl, status in server.served if mdl == model and status == 429)
    rate = steady_rate(ok)
    return f"{model:<18}{len(ok):>10}{rate:>18.1f}{100 * rate / ideal:>9.1f}%{refused:>11}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rpm", type=int, default=60, help="each provider's limit per 60 s window")
    ap.add_argument("--latency", type=float, default=0.5, help="seconds each provider takes to answer")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight per model (limits.concurrency)")
    ap.add_argument("--minutes", type=float, default=3.0, help="about how long the run lasts")
    ap.add_argument("--suite", action="store_true",
                    help="the five benchmarks side by side (suite=quick, models=[gpt-4o,gemini-2.0-flash], every "
                         "child at once): each provider shared by five benchmarks' agents")
    args = ap.parse_args()
    if args.suite:
        return suite_main(args)

    server = FakeLLMServer(rpm={"gpt-4o": args.rpm, "gemini-2.0-flash": args.rpm})
    server.defaults = {"gpt-4o": Reply(text="Here is what I found so far.", delay_s=args.latency),
                       "gemini-2.0-flash": Reply(text="Please go on.", delay_s=args.latency)}
    server.start()
    # a trial that never ends before its step limit: 6 agent and 6 user calls; enough trials, all in flight at once,
    # that each provider always has requests waiting (the limit, not the trials, is what binds)
    steps = 6
    trials = max(8, int(args.rpm * args.minutes / steps))
    work = Path(tempfile.mkdtemp(prefix="bench-rate-limits-"))
    cmd = [sys.executable, "-m", "ehrbench", "benchmark=ehrchatqa_mimic", "benchmark.flows=[incre]",
           f"benchmark.max_steps={steps}", f"limit_tasks={trials}", "trials=1", "model=gpt-4o", f"model.base_url={server.url}/v1",
           f"model.limits.per_minute={args.rpm}", f"model.limits.concurrency={args.concurrency}",
           "user=gemini-2.0-flash", f"+user.model.base_url={server.url}", f"user.model.limits.per_minute={args.rpm}",
           f"user.model.limits.concurrency={args.concurrency}", "user.strategy=plain", "validator=none",
           f"runtime.max_in_flight={trials}", f"tracking.root={work / 'mlruns'}", f"hydra.run.dir={work / 'out'}"]
    wall = run_command(cmd, server)
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{work / 'mlruns' / 'mlflow.db'}")
    [run] = mlflow.search_runs(experiment_names=["ehrchatqa"], output_format="list")
    m = run.data.metrics
    ideal = min(60.0 * args.concurrency / args.latency, args.rpm)
    print(f"{trials} trials in {wall:.0f} s; limit {args.rpm} requests per minute per provider, latency "
          f"{args.latency} s, concurrency {args.concurrency} (ideal: {ideal:.0f} per minute)")
    print(f"{'provider':<18}{'answered':>10}{'per min (steady)':>18}{'of ideal':>10}{'429s sent':>11}")
    for model in ("gpt-4o", "gemini-2.0-flash"):
        print(provider_row(server, model, ideal))
    print(f"trials re-submitted: {m.get('trial_resubmissions', 0):.0f}; failed on infrastructure: "
          f"{m.get('trials_infra_errors', 0):.0f}; valid: {m.get('trials_valid', 0):.0f}")
    waits = {k: round(v, 2) for k, v in m.items() if "limiter" in k or "rate_limit" in k}
    if waits:
        print(json.dumps(waits, indent=1))


def suite_main(args) -> None:
    """Part 4 of the suite issue: one suite, the five benchmarks x two models all at once on one cluster; the agent
    of every child of a model shares that model's provider and its one cluster-wide limiter (the judges and users
    are the benchmarks' offline ones, so the two providers carry the agents alone)."""
    import mlflow

    from ehrbench.benchmarks.clinsql.authoring import main as write_clinsql_tasks

    models = ("gpt-4o", "gemini-2.0-flash")
    server = FakeLLMServer(rpm={m: args.rpm for m in models})
    server.defaults = {m: Reply(text="I could not find that in the records.", delay_s=args.latency) for m in models}
    server.start()
    work = Path(tempfile.mkdtemp(prefix="bench-rate-limits-suite-"))
    write_clinsql_tasks(["--out", str(work / "clinsql"), "--scale", "2", "--per-cell", "1"])
    cmd = [sys.executable, "-m", "ehrbench", "suite=quick", f"models=[{','.join(models)}]", "suite.concurrent_runs=10",
           f"++model.base_url={server.url}", f"++model.limits.per_minute={args.rpm}",
           f"++model.limits.concurrency={args.concurrency}", "data.dictionary=used",
           f"suite.benchmarks.clinsql=['benchmark.task_dir={work / 'clinsql'}','data.scale=2',"
           "'benchmark.grading=offline','grader=none']",
           "suite.benchmarks.physassist=['benchmark.grading=rules','grader=none']",
           "suite.benchmarks.ehragent=['benchmark.databases=[ehrsql_mimic_iii]']",
           "suite.benchmarks.agentehr=['benchmark.max_turns=4','benchmark.tasks=[transfers]',"
           "'benchmark.mimic_iii=false','benchmark.patient_shards=1']",
           f"tracking.root={work / 'mlruns'}", f"hydra.run.dir={work / 'out'}"]
    wall = run_command(cmd, server)
    mlflow.set_tracking_uri(f"sqlite:///{work / 'mlruns' / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["ehrchatqa", "ehragent", "agentehr", "clinsql", "physassist"],
                              output_format="list")
    ideal = min(60.0 * args.concurrency / args.latency, args.rpm)
    print(f"suite: {len(runs)} runs side by side in {wall:.0f} s; limit {args.rpm} requests per minute per provider, "
          f"latency {args.latency} s, concurrency {args.concurrency} (ideal: {ideal:.0f} per minute)")
    print(f"{'provider':<18}{'answered':>10}{'per min (steady)':>18}{'of ideal':>10}{'429s sent':>11}"
          f"{'benchmarks':>12}")
    for model in models:
        sharing = sum(1 for r in runs if r.data.params.get("model.name") == model)
        print(f"{provider_row(server, model, ideal)}{sharing:>12}")
    lost = sum(r.data.metrics.get("trial_resubmissions", 0) + r.data.metrics.get("trials_infra_errors", 0)
               for r in runs)
    print(f"trials that lost an attempt (re-submitted or failed on infrastructure), all runs: {lost:.0f}; "
          f"valid trials: {sum(r.data.metrics.get('trials_valid', 0) for r in runs):.0f}")


if __name__ == "__main__":
    main()
