"""What a request sends of a benchmark's request parameters, read off the wire, beside what the benchmark's table
says that role sends that model (FIDELITY rule 2), as the real OpenAI and google-genai clients put them there.

`EXPECTED` is what each original sends each role, written out from the authors' code (not read from ehrbench's
tables, which `test_sampling.py` checks against it); `sent` reads a logged request body; `expected` renders a
`Sampling` the way each client does (a model that takes no temperature gets none, and its limit as
`max_completion_tokens`; Gemini's names in `generationConfig`); `mismatches` lists every request of a fake-server log
whose parameters are not its role's; `run_with_every_role_on` runs `python -m ehrbench benchmark=<b>` once per model
with that model playing every role, against the fake provider, and asserts both.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import yaml

from ehrbench.llm.base import Sampling

from .fake_llm_server import FakeLLMServer, Reply, Seen, _model_of
from .twins.kit import has_tools, is_embedding

ROOT = Path(__file__).resolve().parents[1]
CONFS = {m: yaml.safe_load((ROOT / "conf" / "model" / f"{m}.yaml").read_text())
         for m in ("gpt-5-mini", "gemini-2.5-flash")}
T = "temperature"
# (benchmark conf, role) -> model -> the parameters its original sends (unset: not sent), with where
EXPECTED = {
    # EHR-ChatQA, src/utils.py get_completion via litellm: reasoning models get no temperature
    ("ehrchatqa", "agent"): {"gpt-5-mini": {}, "gemini-2.5-flash": {T: 0.0}},
    ("ehrchatqa", "user"): {"gpt-5-mini": {}, "gemini-2.5-flash": {T: 1.0}},
    ("ehrchatqa", "verifier"): {"gpt-5-mini": {}, "gemini-2.5-flash": {T: 0.0}},
    ("ehrchatqa", "reflection"): {"gpt-5-mini": {}, "gemini-2.5-flash": {T: 0.0}},
    ("ehrchatqa", "validator"): {"gpt-5-mini": {}, "gemini-2.5-flash": {T: 0.0}},
    # EHRAgent, config.py (chatbot) and medagent.py (knowledge, debugger): temperature 0, top_p 0.95, 800 tokens
    ("ehragent", "agent"): {"gpt-5-mini": {"api": "functions"}, "gemini-2.5-flash": {T: 0.0, "api": "functions"}},
    ("ehragent", "knowledge"): {"gpt-5-mini": {"max_tokens": 800},
                                "gemini-2.5-flash": {T: 0.0, "top_p": 0.95, "max_tokens": 800, "frequency_penalty": 0.0,
                                                     "presence_penalty": 0.0, "max_tokens_name": "max_tokens"}},
    ("ehragent", "debugger"): {"gpt-5-mini": {"max_tokens": 800},
                               "gemini-2.5-flash": {T: 0.0, "top_p": 0.95, "max_tokens": 800, "frequency_penalty": 0.0,
                                                    "presence_penalty": 0.0, "max_tokens_name": "max_tokens"}},
    # ClinSQL, the inference ModelConfig per family and the rubric scorer's judge
    ("clinsql", "agent"): {"gpt-5-mini": {T: 1.0},
                           "gemini-2.5-flash": {T: 1.0, "top_p": 1.0, "seed": 0, "max_tokens": 65_535,
                                                "thinking_budget": -1}},
    ("clinsql", "grader"): {"gpt-5-mini": {T: 0.2, "max_tokens": 1024},
                            "gemini-2.5-flash": {T: 0.2, "max_tokens": 1024}},
    # AgentEHR, agent_llms.py: temperature 0.7 and max_tokens 4096 on every path
    **{("agentehr", role): {"gpt-5-mini": {"max_tokens": 4096},
                            "gemini-2.5-flash": {T: 0.7, "max_tokens": 4096, "max_tokens_name": "max_tokens"}}
       for role in ("agent", "summarizer", "extractor")},
    # PhysAssistBench, model_configs.yaml / eval_runner.py (gpt-5-mini: the Responses entry), the judges, the patient
    ("physassist", "agent"): {"gpt-5-mini": {"max_tokens": 1024, "reasoning_effort": "minimal"},
                              "gemini-2.5-flash": {T: 0.2, "max_tokens": 10_240, "max_tokens_name": "max_tokens"}},
    ("physassist", "grader"): {"gpt-5-mini": {"max_tokens": 4000, "reasoning_effort": "minimal"},
                               "gemini-2.5-flash": {T: 0.1, "max_tokens": 4000, "max_tokens_name": "max_tokens"}},
    ("physassist", "user"): {"gpt-5-mini": {"max_tokens": 300},
                             "gemini-2.5-flash": {T: 0.7, "max_tokens": 300, "max_tokens_name": "max_tokens"}},
}

# (benchmark conf, "role:call") -> how that one call of a role departs from the role's parameters, with where
CALLS = {
    ("physassist", "grader:iirs"): lambda p: {**p, T: 0.0} if T in p else p,      # iirs.py: the IIRS judge at 0
    ("physassist", "grader:write"): lambda p: {**p, "max_tokens": 2000},          # eval_discharge_planning.py
}

GEMINI_NAMES = {"temperature": "temperature", "top_p": "topP", "presence_penalty": "presencePenalty",
                "frequency_penalty": "frequencyPenalty", "seed": "seed", "max_tokens": "maxOutputTokens"}
OPENAI_NAMES = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "seed", "reasoning_effort")


def is_gemini(path: str) -> bool:
    return ":generateContent" in path


def sent(path: str, body: dict) -> dict:
    """The request parameters `body` carries, under ehrbench's names (absent: None)."""
    if is_gemini(path):
        config = body.get("generationConfig", {})
        thinking = config.get("thinkingConfig", {})
        return {**{ours: config.get(theirs) for ours, theirs in GEMINI_NAMES.items()},
                "thinking_budget": thinking.get("thinkingBudget", thinking.get("thinking_budget"))}
    limit = [name for name in ("max_tokens", "max_completion_tokens") if name in body]
    return {**{name: body.get(name) for name in OPENAI_NAMES},
            "max_tokens": body.get(limit[0]) if limit else None, "max_tokens_name": limit[0] if limit else None,
            "api": "functions" if "functions" in body else "tools" if "tools" in body else None}


def expected(path: str, body: dict, sampling: Sampling, model: dict) -> dict:
    """What the client sends for `sampling` to `model` (a conf), where `sent` reads it. A trial-seeded role
    ("trial") is expected to send the seed the request carries, when it is a whole number."""
    seed = sampling.seed
    if seed == "trial":
        seed = body.get("seed") if not is_gemini(path) else body.get("generationConfig", {}).get("seed")
        assert isinstance(seed, int), f"a trial-seeded call sent no seed: {seed!r}"
    if is_gemini(path):
        return {"temperature": sampling.temperature, "top_p": sampling.top_p,
                "presence_penalty": sampling.presence_penalty, "frequency_penalty": sampling.frequency_penalty,
                "seed": seed, "max_tokens": sampling.max_tokens,
                "thinking_budget": sampling.thinking_budget}
    samples = model.get("supports_temperature", True)
    offered = "functions" in body or "tools" in body
    return {"temperature": sampling.temperature if samples else None, "top_p": sampling.top_p if samples else None,
            "presence_penalty": sampling.presence_penalty if samples else None,
            "frequency_penalty": sampling.frequency_penalty if samples else None, "seed": seed,
            "reasoning_effort": sampling.reasoning_effort, "max_tokens": sampling.max_tokens,
            "max_tokens_name": None if sampling.max_tokens is None else
            sampling.max_tokens_name if samples else "max_completion_tokens",
            "api": (sampling.api or "tools") if offered else None}


def mismatches(requests: list, role_of, benchmark: str, model: str) -> tuple[list[str], set[str]]:
    """Every chat request of a fake-server log (`Seen`) whose parameters are not what `benchmark`'s original sends
    its role (`role_of(path, body)`) when `model` plays every role (`EXPECTED`, and `CALLS` for a role's own
    calls), and the roles and calls seen."""
    problems, roles = [], set()
    for seen in requests:
        if is_embedding(seen.path):
            continue
        call = role_of(seen.path, seen.body)             # a role, or "role:call" for one of its own calls
        role = call.split(":")[0]
        roles.add(call)
        if (benchmark, role) not in EXPECTED:
            problems.append(f"a request no role of {benchmark} sends ({role}): {str(seen.body)[:300]}")
            continue
        params = CALLS.get((benchmark, call), lambda p: p)(EXPECTED[benchmark, role][model])
        want = expected(seen.path, seen.body, Sampling(**params), CONFS[model])
        got = sent(seen.path, seen.body)
        if got != want:
            problems.append(f"{benchmark} {role} on {model}: sent {got}, the original sends {want}")
    return problems, roles


MODELS = ("gpt-5-mini", "gemini-2.5-flash")


def role_by(*markers: tuple[str, str], tools: str | None = "agent", otherwise: str = "unknown") -> Callable:
    """(path, body) -> role: `tools` for a request that offers tools, else the first role whose marker (a prompt's
    own words) is in the request, else `otherwise`."""
    def role_of(path: str, body: dict) -> str:
        if tools and has_tools(body):
            return tools
        text = json.dumps(body, ensure_ascii=False)
        return next((role for role, marker in markers if marker in text), otherwise)
    return role_of


def run_with_every_role_on(benchmark: str, command: list[str], role_of: Callable, tmp_path: Path,
                           scripts: dict[str, list[Reply]] | None = None, defaults: dict[str, Reply] | None = None,
                           roles: tuple[str, ...] = (), calls: tuple[str, ...] = ()) -> dict[str, list[Seen]]:
    """`python -m ehrbench -m model=gpt-5-mini,gemini-2.5-flash <command>`, each model playing every role (`roles`:
    the conf groups whose model follows the agent's, `user`, `validator`, `grader`; `calls`: the "role:call"s of
    `CALLS` the run must make), through the real clients
    against one fake provider that answers each (model, role) from `scripts`, then `defaults`. Asserts the run
    ends well, that every role of `benchmark` was called, and that each request sent its role's parameters as the
    original does (`EXPECTED`). Returns each model's requests."""
    server = FakeLLMServer(route=lambda path, body: (_model_of(path, body), role_of(path, body)))
    for model in MODELS:
        wire = CONFS[model]["model"]                  # the id on the wire (gpt-5-mini's is dated)
        for role, replies in (scripts or {}).items():
            server.push(*replies, model=(wire, role))
        server.defaults.update({(wire, role): reply for role, reply in (defaults or {}).items()})
    server.start()
    try:
        out = subprocess.run([sys.executable, "-m", "ehrbench", "-m", f"model={','.join(MODELS)}",
                              f"++model.base_url={server.url}/v1", *[f"{r}.model=${{model}}" for r in roles],
                              *command, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=900,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    seen = {model: [s for s in server.requests if s.key and s.key[0] == CONFS[model]["model"]] for model in MODELS}
    for model in MODELS:
        problems, called = mismatches(seen[model], role_of, benchmark, model)
        assert not problems, "\n".join(problems[:10])
        assert {c.split(":")[0] for c in called} == {role for name, role in EXPECTED if name == benchmark}, \
            (model, called)
        assert set(calls) <= called, (model, "calls never made", set(calls) - called)
    return seen
