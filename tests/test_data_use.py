"""Credentialed data never reaches a model that may keep it (`data_use.py`): every role of every benchmark is
checked, the run stops before any model call, Ray start or data copy, declarations are recorded, and every bad
declaration is named with its choices."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT
from .test_config import composed

BENCHMARK_CONFS = sorted(p.stem for p in (ROOT / "conf" / "benchmark").glob("*.yaml"))
SERVED = {"provider": "openai-compatible", "name": "served", "model": "m", "base_url": "http://127.0.0.1:8000/v1"}
PUBLIC = {"provider": "openai-compatible", "name": "gpt-4o", "model": "gpt-4o", "base_url": None}


def _bench(conf_name: str):
    from ehrbench import benchmarks

    options = composed(f"benchmark={conf_name}")["benchmark"]
    return benchmarks.load(options["name"], options)


def _data(tmp_path, bench, data_use: str | None = None, embedder: dict | None = None):
    """Every source of `bench` a file of the user's own (credentialed unless `data_use` declares otherwise)."""
    from ehrbench.config import DataOptions

    files = {}
    for db in bench.resources().databases:
        files[db] = str(tmp_path / f"{db}.db")
        Path(files[db]).touch()
    return DataOptions(files=files, data_use={db: data_use for db in files} if data_use else {},
                       embedder=embedder or {})


def _settings(bench, public_field: str | None = None, **fields):
    from ehrbench.benchmark import TrialSettings

    models = {f: dict(SERVED) for f in ("agent_model", "user_model", "validator_model", "grader_model")}
    if public_field:
        models[public_field] = dict(PUBLIC)
    return TrialSettings(benchmark=bench.name, **{**models, **fields})


def test_every_role_a_benchmark_calls_is_declared_and_the_embedder_where_it_hosts_an_index():
    """The roles each benchmark's code asks `model_for`, read from its source, are its `model_roles`; "embedder"
    is among them exactly where it hosts a value index (database columns or values of its own)."""
    from ehrbench.benchmark import ROLE_MODELS, Benchmark

    for conf_name in BENCHMARK_CONFS:
        bench = _bench(conf_name)
        package = Path(sys.modules[type(bench).__module__].__file__).parent
        called = {m for f in package.rglob("*.py") for m in re.findall(r'model_for\("(\w+)"', f.read_text())}
        assert called and called == set(bench.model_roles) - {"embedder"}, conf_name
        assert called <= set(ROLE_MODELS)
        indexes = bool(bench.resources().indexed_columns) or type(bench).index_values is not Benchmark.index_values
        assert ("embedder" in bench.model_roles) == indexes, conf_name


@pytest.mark.parametrize("conf_name", BENCHMARK_CONFS)
def test_each_role_of_each_benchmark_on_a_public_endpoint_is_refused_with_credentialed_data(tmp_path, conf_name):
    from ehrbench.config import TrackingOptions
    from ehrbench.data_use import check

    bench = _bench(conf_name)
    data = _data(tmp_path, bench)
    assert not check(bench, _settings(bench), data, TrackingOptions()).refusals     # every model served: it runs
    for role in bench.model_roles:
        if role == "embedder":
            verdict = check(bench, _settings(bench), _data(tmp_path, bench, embedder={"provider": "openai"}),
                            TrackingOptions())
            served = check(bench, _settings(bench), _data(tmp_path, bench, embedder={
                "provider": "openai", "base_url": "http://127.0.0.1:9/v1"}), TrackingOptions())
            assert not served.refusals and served.params()["data_handling.embedder"] == "local"
        else:
            settings = _settings(bench)
            verdict = check(bench, _settings(bench, settings.role_field(role)), data, TrackingOptions())
        assert verdict.params()[f"data_handling.{role}"] == "public"
        [refusal] = [r for r in verdict.refusals if re.search(rf"\b{role}\b", r.split(" call")[0])]
        assert "a public endpoint" in refusal and "data_handling=zero_retention" in refusal and ".base_url=" in refusal
        # the same endpoint over the synthetic world, or over data declared open, is no one's business
        assert not check(bench, _settings(bench, "agent_model"), _data(tmp_path, bench, "open"),
                         TrackingOptions()).refusals
    synthetic = check(bench, _settings(bench, "agent_model"), type(data)(), TrackingOptions())
    assert not synthetic.refusals and {s.data_use for s in synthetic.sources} == {"synthetic"}
    from ehrbench.benchmark import TrialSettings                  # the reference agent calls no model at all

    reference = check(bench, TrialSettings(benchmark=bench.name), data, TrackingOptions())
    assert not reference.refusals and reference.credentialed
    assert {e.handling for e in reference.endpoints} <= {"local"}


def test_a_model_the_benchmark_does_not_name_is_checked_too(tmp_path):
    """A benchmark from outside that forgets a role (a grader its code calls) still has that model checked."""
    from ehrbench.config import TrackingOptions
    from ehrbench.data_use import check

    bench = _bench("ehragent")
    type(bench).model_roles, before = ("agent",), type(bench).model_roles
    try:
        verdict = check(bench, _settings(bench, "grader_model"), _data(tmp_path, bench), TrackingOptions())
    finally:
        type(bench).model_roles = before
    assert any(r.startswith("the grader role calls gpt-4o") for r in verdict.refusals)


def test_the_classes_of_hosts_and_stores():
    from ehrbench.data_use import model_endpoint, network_class, store_of

    for host in ("127.0.0.1", "::1", "[::1]", "10.1.2.3", "192.168.0.7", "172.16.5.5", "169.254.1.1", "localhost",
                 "vllm.localhost"):
        assert network_class(host) == "local", host
    for host in ("8.8.8.8", "2001:4860:4860::8888", "no-such-host.invalid"):
        assert network_class(host) == "public", host
    assert model_endpoint(PUBLIC, ("agent",), "model").host == "api.openai.com"
    gemini = model_endpoint({"provider": "gemini", "name": "g", "model": "g"}, ("user",), "user.model")
    assert (gemini.host, gemini.handling, gemini.declared) == ("generativelanguage.googleapis.com", "public", False)
    assert model_endpoint({"provider": "scripted", "name": "scripted"}, ("agent",), "model").handling == "local"
    # a gateway on your network that forwards to a provider is declared public: the declaration wins
    gateway = model_endpoint({**SERVED, "data_handling": "public"}, ("agent",), "model")
    assert (gateway.handling, gateway.declared) == ("public", True)
    for uri in (None, "sqlite:///mlruns/mlflow.db", "file:///tmp/mlruns", "/tmp/mlruns", "http://127.0.0.1:5000",
                "postgresql://u@10.0.0.4/mlflow"):
        assert store_of("tracking.uri", uri).local, uri
    for uri in ("databricks", "https://mlflow.example.invalid", "http://8.8.8.8:5000"):
        assert not store_of("tracking.uri", uri).allowed and store_of("tracking.uri", uri, True).allowed, uri


def test_a_remote_store_or_cache_is_refused_with_credentialed_data_unless_declared(tmp_path):
    from ehrbench.config import TrackingOptions
    from ehrbench.data_use import check

    bench = _bench("clinsql")
    data = _data(tmp_path, bench)
    remote = TrackingOptions(uri="https://mlflow.example.invalid")
    [refusal] = check(bench, _settings(bench), data, remote).refusals
    assert refusal.startswith("tracking.uri=https://mlflow.example.invalid would keep traces") and \
        "tracking.credentialed_ok=true" in refusal
    assert not check(bench, _settings(bench), data, TrackingOptions(uri=remote.uri, credentialed_ok=True)).refusals
    assert not check(bench, _settings(bench), _data(tmp_path, bench, "open"), remote).refusals
    cached = _settings(bench, agent_model={**SERVED, "cache_dir": "s3://bucket/cache"})
    [refusal] = check(bench, cached, data, TrackingOptions()).refusals
    assert refusal.startswith("model.cache_dir=s3://bucket/cache") and "a folder on this machine" in refusal
    assert not check(bench, _settings(bench, agent_model={**SERVED, "cache_dir": str(tmp_path)}), data,
                     TrackingOptions()).refusals


@pytest.mark.parametrize("override, message", [
    ("data.mimic_iv_star.data_use=opn", "data.mimic_iv_star.data_use='opn': must be one of ['auto', 'synthetic', "
     "'open', 'credentialed']"),
    ("data.mimic_iv_star.data_use=null", "data.mimic_iv_star.data_use=None: must be one of ['auto', 'synthetic', "
     "'open', 'credentialed']"),
    ("data.mimic_iv_star.data_use=", "data.mimic_iv_star.data_use='': must be one of"),
    ("data.eicu_star.data_use=open", "data.eicu_star.data_use=open: data.eicu_star.path is null, so eicu_star is the "
     "synthetic world"),
    ("+data.mimic_v.path=/tmp", "data.mimic_v: unknown data source; the sources are ['ehrsql_eicu', "
     "'ehrsql_mimic_iii', 'eicu_star', 'mimic_iv', 'mimic_iv_star', 'treqs']"),
    ("+data.mimic_iv.datause=open", "data.mimic_iv.datause: unknown field; a data source takes path"),
    ("+data.embedder.data_handlin=local", "data.embedder.data_handlin: unknown field"),
    ("tracking.credentialed_ok=perhaps", "tracking.credentialed_ok='perhaps': must be true or false"),
])
def test_each_bad_declaration_is_named_with_its_choices(tmp_path, override, message):
    from ehrbench.config import validate
    from ehrbench.errors import ConfigurationError

    cfg = composed(override, f"tracking.root={tmp_path / 'm'}", f"data.root={tmp_path / 'g'}",
                   f"data.index_cache={tmp_path / 'g' / 'vi'}")
    with pytest.raises(ConfigurationError) as e:
        validate(cfg)
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize("cfg, message", [
    ({**PUBLIC, "data_handling": "zero-retention"}, "model.data_handling='zero-retention': must be one of ['auto', "
     "'local', 'zero_retention', 'public']"),
    ({**PUBLIC, "data_handling": None}, "model.data_handling=None: must be one of"),
    ({**PUBLIC, "data_handling": "local"}, "model.data_handling=local: gpt-4o has no model.base_url, so it is called "
     "at api.openai.com, a host you do not run"),
])
def test_each_bad_data_handling_is_named_with_its_choices(cfg, message):
    from ehrbench.data_use import model_endpoint
    from ehrbench.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as e:
        model_endpoint(cfg, ("agent",), "model")
    assert str(e.value).startswith(message)


def test_no_shipped_conf_claims_zero_retention_and_every_model_can_be_declared():
    """zero_retention is the user's to declare, for their own account: never a conf's."""
    import yaml

    def values(node):
        if isinstance(node, dict):
            return [v for child in node.values() for v in values(child)]
        return [v for child in node for v in values(child)] if isinstance(node, list) else [node]

    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        assert yaml.safe_load(path.read_text())["data_handling"] == "auto", path.name
    claims = [p.name for p in (ROOT / "conf").rglob("*.yaml") if "zero_retention" in values(yaml.safe_load(
        p.read_text()) or {})]
    assert not claims


def test_declarations_never_change_a_runs_identity():
    from ehrbench.runtime.checkpoint import run_identity

    plain = composed("model=gpt-4o")
    declared = composed("model=gpt-4o", "model.data_handling=zero_retention", "data.mimic_iv_star.data_use=open")
    other = composed("model=gpt-4o", "model.timeout_s=5")
    assert run_identity(plain, "t") == run_identity(declared, "t") != run_identity(other, "t")


def _run(args, timeout=120, **env):
    return subprocess.run([sys.executable, "-m", "ehrbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1", **env})


def test_the_command_refuses_before_anything_and_leaves_a_finished_run_untouched(tmp_path):
    """`python -m ehrbench` with a file of your own and a public model stops with exit 2, naming role, model,
    source, rule and fixes, before any Ray start or database copy; a dry run prints the verdict beside the estimate;
    bad declarations stop the same way; a finished run in the same store is as it was."""
    import mlflow

    from .conftest import mlflow_store

    own = tmp_path / "mimic_iv_star.sqlite"
    own.write_bytes(b"")                       # never opened: the check comes before the file's schema check
    store = mlflow_store(tmp_path / "mlruns")
    uri = f"sqlite:///{store / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    finished = client.create_run(client.create_experiment("ehrchatqa")).info.run_id
    client.log_metric(finished, "SR-5", 42.0)
    client.set_terminated(finished, "FINISHED")
    common = ["user=scripted", f"data.mimic_iv_star.path={own}", f"tracking.root={store}",
              f"data.root={tmp_path / 'gen'}", f"data.index_cache={tmp_path / 'vi'}", f"hydra.run.dir={tmp_path / 'out'}"]
    out = _run(["model=gpt-4o", *common], RAY_ADDRESS="127.0.0.1:9")     # a cluster it would fail to join
    assert out.returncode == 2, out.stderr[-2000:]
    message = out.stderr.split("ehrbench: ", 1)[1]
    assert message.startswith("ehrchatqa with gpt-4o: credentialed data would reach a place that may keep it. "
                              f"Credentialed: mimic_iv_star ({own}).")
    assert "the agent role calls gpt-4o at api.openai.com, a public endpoint" in message
    assert "model.data_handling=zero_retention" in message and "model.base_url=http://<a host you run>/v1" in message
    assert "PhysioNet's Credentialed Data Use Agreement" in message and "data.mimic_iv_star.data_use=open" in message
    assert not list((tmp_path / "gen").iterdir())                       # no database built or copied
    dry = _run(["model=gpt-4o", "dry_run=true", *common])
    assert dry.returncode == 2 and "model endpoints: agent: gpt-4o at api.openai.com, public" in dry.stdout
    assert "mimic_iv_star credentialed (your file" in dry.stdout and "check: REFUSED" in dry.stdout
    reference = _run(["dry_run=true", *common])                  # the offline reference calls no model
    assert reference.returncode == 0 and "check: passed" in reference.stdout, reference.stderr[-1500:]
    ok = _run(["model=gpt-4o", "dry_run=true", "model.data_handling=zero_retention", *common])
    assert ok.returncode == 0 and "zero_retention (declared)" in ok.stdout and "check: passed" in ok.stdout
    assert "estimate for" in ok.stdout
    remote = _run(["model=gpt-4o", "dry_run=true", "model.data_handling=zero_retention", "tracking=server",
                   "tracking.uri=https://mlflow.example.invalid", *common])
    assert remote.returncode == 2 and "tracking.uri=https://mlflow.example.invalid would keep" in remote.stderr
    for bad, named in (("data.mimic_iv_star.data_use=opn", "data.mimic_iv_star.data_use='opn': must be one of"),
                       ("data.mimic_v.path=/tmp", "data.mimic_v: unknown data source; the sources are"),
                       ("model.data_handling=zero-retention", "model.data_handling='zero-retention': must be one of")):
        bad_out = _run(["model=gpt-4o", bad, *common])
        assert bad_out.returncode == 2 and named in bad_out.stderr, (bad, bad_out.stderr[-1500:])
    [run] = client.search_runs([client.get_experiment_by_name("ehrchatqa").experiment_id])
    assert (run.info.run_id, run.info.status, run.data.metrics) == (finished, "FINISHED", {"SR-5": 42.0})
    assert not (store / "runs").exists()


def test_a_suite_checks_every_child_before_the_first_starts(tmp_path):
    """`models=[a served model, gpt-4o]` over a file of your own: the first child's agent is served, but its judge
    (ClinSQL's, gpt-5-chat by grader=auto) is a public API: refused before any child (or the parent run) starts."""
    import mlflow

    from .conftest import mlflow_store

    own = tmp_path / "mimic_iv.duckdb"
    own.write_bytes(b"")
    store = mlflow_store(tmp_path / "mlruns")
    out = _run(["suite=quick", "models=[vllm-qwen3-32b,gpt-4o]", "suite.only=[clinsql,physassist]",
                f"data.mimic_iv.path={own}", f"tracking.root={store}", f"data.root={tmp_path / 'gen'}",
                f"hydra.run.dir={tmp_path / 'out'}"], timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "ehrbench: clinsql with vllm-qwen3-32b: credentialed data would reach" in out.stderr
    assert "the grader role calls gpt-5-chat at api.openai.com" in out.stderr
    assert "grader=gpt-5-chat grader.model.data_handling=zero_retention" in out.stderr
    assert "suite quick: [1/" not in out.stdout                        # no child started
    client = mlflow.MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    assert not client.search_runs([e.experiment_id for e in client.search_experiments()])
