"""Every option is checked at start against the typed schema (config.py); a mistyped one never touches a run."""
import os
import subprocess
import sys

import pytest

from .conftest import ROOT


def composed(*overrides: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=list(overrides)), resolve=True)


@pytest.mark.parametrize("override, message", [
    ("trials=0", "trials=0: must be an integer of at least 1 (conf/config.yaml or the override)"),
    ("limit_tasks=-1", "limit_tasks=-1: must be an integer of at least 1 (or null) (conf/config.yaml or the override)"),
    ("data.seed=notanint", "data.seed='notanint': must be an integer of at least 0 (conf/data/*.yaml or the override)"),
    ("data.scale=0", "data.scale=0: must be a number above 0 (conf/data/*.yaml or the override)"),
    ("data.dictionary=some", "data.dictionary='some': must be one of ['full', 'used'] (conf/data/*.yaml or the override)"),
    ("benchmark.max_steps=0", "benchmark.max_steps=0: must be an integer of at least 1 (conf/benchmark/*.yaml or the override)"),
    ("resume=maybe", "resume='maybe': must be true or false (conf/config.yaml or the override)"),
    ("tracking.log_traces=3", "tracking.log_traces=3: must be true or false (conf/tracking/*.yaml or the override)"),
    ("tracking.write_traces=later", "tracking.write_traces='later': must be one of ['auto', 'during', 'after'] "
     "(conf/tracking/*.yaml or the override)"),
    ("runtime.db_replicas=0", "runtime.db_replicas=0: must be an integer of at least 1 (conf/runtime/*.yaml or the override)"),
    ("validator.max_attempts=0", "validator.max_attempts=0: must be an integer of at least 1 (conf/validator/*.yaml or the override)"),
    ("user.latency_s=-1", "user.latency_s=-1: must be a number of at least 0 (conf/user/*.yaml or the override)"),
    ("model.latency_s=fast", "model.latency_s='fast': must be a number of at least 0 (conf/model/*.yaml or the override)"),
    ("data.mimic_iv_star.path=/no/such.sqlite", "data.mimic_iv_star.path='/no/such.sqlite': no such file; point it at"),
])
def test_each_bad_option_is_named_with_its_fix(tmp_path, override, message):
    from ehrbench.config import validate
    from ehrbench.llm.base import ConfigurationError

    cfg = composed(override, f"tracking.root={tmp_path / 'm'}", f"data.root={tmp_path / 'g'}",
                   f"data.index_cache={tmp_path / 'g' / 'vi'}")
    with pytest.raises(ConfigurationError) as e:
        validate(cfg)
    assert str(e.value).startswith(message)


def test_an_unwritable_folder_is_named():
    from ehrbench.config import validate
    from ehrbench.llm.base import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"tracking.root='/proc/forbidden': cannot create or write this folder"):
        validate(composed("tracking.root=/proc/forbidden"))


def test_good_options_come_back_typed(tmp_path):
    from ehrbench.config import validate

    conf = validate(composed("trials=3", "limit_tasks=2", f"tracking.root={tmp_path / 'm'}",
                             f"data.root={tmp_path / 'g'}", f"data.index_cache={tmp_path / 'g' / 'vi'}"))
    assert (conf.run.trials, conf.run.limit_tasks, conf.limits.max_steps, conf.runtime.max_in_flight) == (3, 2, 30, 256)
    assert conf.benchmark["task_dir"] == str(ROOT / "data" / "tasks" / "ehrchatqa")     # made absolute


def test_an_unregistered_benchmark_is_refused_with_the_known_ones(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ehrbench", "benchmark.name=nope", f"hydra.run.dir={tmp_path}",
                          f"tracking.root={tmp_path / 'm'}", f"data.root={tmp_path / 'g'}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("ehrbench: benchmark.name='nope' is not registered; known: "
                                                          "['agentehr', 'clinsql', 'ehragent', 'ehrchatqa', 'physassist']")


def test_usable_cpus_honours_a_container_s_cgroup_quota(tmp_path):
    """write_traces=auto counts the CPUs a container may use, not the host's: a `--cpus=1.5` quota caps it."""
    import os

    from ehrbench.config import usable_cpus

    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "quota").write_text("150000 100000\n")
    (tmp_path / "none").write_text("max 100000\n")
    assert usable_cpus(str(tmp_path / "quota")) == min(affinity, 1.5)
    assert usable_cpus(str(tmp_path / "none")) == usable_cpus(str(tmp_path / "missing")) == affinity
