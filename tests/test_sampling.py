"""What each model is sent belongs to the benchmark (`sampling.py`): every role of every benchmark, played by
gpt-5-mini and by gemini-2.5-flash, gets exactly the parameters its authors' code sends that model family (written
out in `wire.py` from their code, with where), the real clients put exactly those on the wire, a run can override one
parameter of one role only as a recorded departure, and no model conf carries request parameters."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ehrbench.llm.base import ChatRequest, Sampling
from ehrbench.trial import Message

from .fake_llm_server import Reply
from .wire import CONFS, EXPECTED, T, expected, sent

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str):
    from ehrbench import benchmarks

    from .test_config import composed

    options = composed(f"benchmark={name}")["benchmark"]
    return benchmarks.load(options["name"], options)


def test_every_role_of_every_benchmark_is_in_the_table():
    from ehrbench.benchmarks import BENCHMARKS

    for name in BENCHMARKS:
        roles = {r for r in _bench(name).model_roles if r != "embedder"}
        assert roles == {role for bench, role in EXPECTED if bench == name}, name


@pytest.mark.parametrize("bench_role", sorted(EXPECTED), ids=lambda k: "-".join(k))
def test_each_role_gets_its_originals_parameters_for_gpt_5_mini_and_gemini_2_5_flash(bench_role):
    name, role = bench_role
    bench = _bench(name)
    for model, expected in EXPECTED[bench_role].items():
        assert bench.sampling(role, CONFS[model]) == Sampling(**expected), (name, role, model)


@pytest.mark.parametrize("model", sorted(CONFS))
def test_the_clients_send_exactly_the_tables_parameters(server, monkeypatch, model):
    """Every benchmark's every role, through the real client against the fake provider: the request body holds the
    table's parameters under the provider's names and nothing else of the kind."""
    from ehrbench.llm.registry import build_model

    cfg = {**CONFS[model], "retry": {"max_attempts": 2, "initial_backoff_s": 0.01, "max_backoff_s": 0.02}}
    gemini = cfg["provider"] == "gemini"
    cfg["base_url"] = server.url if gemini else server.url + "/v1"
    monkeypatch.setenv("GEMINI_API_KEY" if gemini else "OPENAI_API_KEY", "test-key")
    client = build_model(cfg)
    for (name, role), params in EXPECTED.items():
        server.push(Reply(text="ok"))
        sampling = Sampling(**params[model])
        asyncio.run(client.complete(ChatRequest([Message("user", "q")], **sampling.request(7))))
        seen = server.requests[-1]
        assert sent(seen.path, seen.body) == expected(seen.path, seen.body, sampling, CONFS[model]), (name, role)


def test_a_run_may_override_a_roles_parameter_only_as_a_recorded_departure():
    from ehrbench.errors import ConfigurationError
    from ehrbench.sampling import check_overrides

    plain = _bench("clinsql")
    bench = type(plain)({**plain.options, "sampling": {"agent": {"reasoning_effort": "high"}}})   # never the cached one
    assert bench.sampling("agent", CONFS["gpt-5-mini"]).reasoning_effort == "high"
    assert bench.sampling("grader", CONFS["gpt-5-mini"]).reasoning_effort is None
    assert "sampling.agent.reasoning_effort=high (the original's table says otherwise)" in bench.recorded_contract()[1]
    for bad, named in (({"judge": {T: 0}}, "benchmark.sampling.judge: not a role"),
                       ({"agent": {"temprature": 0}}, "benchmark.sampling.agent.temprature: not a request parameter"),
                       ("hot", "a mapping role -> parameters")):
        with pytest.raises(ConfigurationError, match=named):
            check_overrides(bad, bench.model_roles)


def test_a_table_row_names_a_family_and_parameters_that_exist():
    from ehrbench.sampling import Rule

    with pytest.raises(ValueError, match="unknown model family"):
        Rule(("agent",), "gpt-6", {}, "")
    with pytest.raises(ValueError, match="unknown request parameters"):
        Rule(("agent",), "any", {"temp": 1}, "")
    assert Sampling(seed="trial").request(41)["seed"] == 41 and Sampling(seed=0).request(41)["seed"] == 0


def test_the_command_stops_at_a_bad_override_naming_it(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "ehrbench", "benchmark=clinsql",
                          "+benchmark.sampling.judge.temperature=0", f"hydra.run.dir={tmp_path}",
                          f"tracking.root={tmp_path / 'm'}", f"data.root={tmp_path / 'g'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "benchmark.sampling.judge: not a role of this benchmark" in out.stderr



def test_every_benchmark_says_how_each_roles_failed_turn_ends():
    """Each benchmark's failure table (`failures.py`, on its docs page) covers every model role it calls, for a reply
    cut off or blocked before any text and a request refused (its size, any other 400); its agent also for a reply
    cut off after some text."""
    from ehrbench.benchmarks import BENCHMARKS

    for name in BENCHMARKS:
        bench = _bench(name)
        roles = tuple(r for r in bench.model_roles if r not in ("embedder", "verifier", "reflection"))
        covered = bench.failure_table.covered(roles)
        for role in roles:
            need = {"cut_off", "blocked"} | ({"cut_with_text", "refused_for_size", "bad_request"}
                                             if role == "agent" else set())
            if role in ("extractor",):
                need = {"cut_off", "blocked"}
            assert need <= covered[role], (name, role, need - covered[role])
