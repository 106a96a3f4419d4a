"""The benchmark registry: the one place that names benchmark packages.

Adding a benchmark is a package under `benchmarks/`, a `conf/benchmark/<name>.yaml`, and a line in `BENCHMARKS`.
A benchmark that lives outside ehrbench needs no line here: its conf names the class (`entry: package.module:Class`).
Every process (driver, trial workers, user simulators) builds its own instance from the name and options with
`load`, and keeps it for the next call with the same options.
"""
from __future__ import annotations

import importlib
import json
from functools import lru_cache

from ..benchmark import Benchmark
from ..llm.base import ConfigurationError

BENCHMARKS = {
    "ehrchatqa": "ehrbench.benchmarks.ehrchatqa.benchmark:EhrChatQA",
    "ehragent": "ehrbench.benchmarks.ehragent.benchmark:EhrAgentBenchmark",
    "clinsql": "ehrbench.benchmarks.clinsql.benchmark:ClinSqlBenchmark",
    "agentehr": "ehrbench.benchmarks.agentehr.benchmark:AgentEhrBenchmark",
    "physassist": "ehrbench.benchmarks.physassist.benchmark:PhysAssistBenchmark",
}


def benchmark_class(name: str, entry: str | None = None) -> type[Benchmark]:
    target = entry or BENCHMARKS.get(name)
    if target is None:
        raise ConfigurationError(f"benchmark.name={name!r} is not registered; known: {sorted(BENCHMARKS)} "
                                 "(or set benchmark.entry=package.module:Class for a benchmark outside ehrbench)")
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigurationError(f"benchmark {name!r}: cannot import {target!r} ({e}); benchmark.entry must be "
                                 "'package.module:Class' importable on every node") from None
    if not (isinstance(cls, type) and issubclass(cls, Benchmark)):
        raise ConfigurationError(f"benchmark {name!r}: {target!r} is not a subclass of ehrbench.benchmark.Benchmark")
    return cls


def load(name: str, options: dict) -> Benchmark:
    """The benchmark `name` built from its options (conf/benchmark as plain data); one instance per process."""
    return _load(name, json.dumps(options, sort_keys=True, default=str))


@lru_cache(maxsize=16)
def _load(name: str, options_json: str) -> Benchmark:
    options = json.loads(options_json)
    return benchmark_class(name, options.get("entry"))(options)
