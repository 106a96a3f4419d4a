"""Credentialed data never reaches a model that may keep it.

MIMIC-III, MIMIC-IV and eICU come under PhysioNet's Credentialed Data Use Agreement, which forbids sharing the data
with third parties, "including sending it through APIs"; PhysioNet's guidance on LLMs (September 2025) allows an
online service only with zero data retention, no training and no human review, and recommends locally deployed
models. A run sends database rows to every model role it calls (tool results, judge prompts with result tables, the
user simulator's and the validator's view of the conversation, the values the value index embeds) and keeps them in
its MLflow store and its response caches. So before any model call, Ray start or data copy, the run is checked:

- every data source it queries has a *data-use class*: `synthetic` (the world ehrbench renders), `open` (public demo
  data under ODbL, such as the MIMIC-III/IV and eICU demos) or `credentialed`: any file `data.<db>.path` names is
  credentialed unless the user declares otherwise (`data.<db>.data_use=open`);
- every model endpoint a role calls has a *data-handling class*: `local` (a loopback or private-network host, i.e. a
  server the user runs, or no endpoint at all), `zero_retention` (the user has checked, for their own account, zero
  retention, no training and no human review, and says so: `model.data_handling=zero_retention`; no conf shipped with
  ehrbench claims it) or `public` (a provider's API when `base_url` is not given, any other host);
- with a credentialed source, every role must be `local` or `zero_retention`, the MLflow store local (a file, or a
  server on loopback or a private network, unless `tracking.credentialed_ok=true` for one the user controls) and
  every response cache a folder on this machine. Otherwise the run stops (exit 2) naming each role, model and source,
  the rule, and the two fixes.

The verdict travels with the run: params `data_use.<db>` and `data_handling.<role>`, the same as tags under
`ehrbench.`, a sentence in the run's description, and lines at start (and in a dry run).
"""
from __future__ import annotations

import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import urlsplit

from .benchmark import ROLE_MODELS, Benchmark, TrialSettings
from .config import DataOptions, TrackingOptions
from .errors import ConfigurationError

DATA_USE = ("synthetic", "open", "credentialed")
HANDLING = ("local", "zero_retention", "public")
AUTO = "auto"                       # the conf's default: the class follows from the file or the host
# where a provider's client sends requests when the conf gives no base_url
PROVIDER_HOSTS = {"openai-compatible": "api.openai.com", "gemini": "generativelanguage.googleapis.com",
                  "openai": "api.openai.com"}
HOSTED_STORES = ("databricks", "databricks-uc", "uc")     # MLflow stores run by a provider, not by the user
# where each settings field's model is configured, for the fixes a refusal names
FIELD_KEYS = {"agent_model": "model", "user_model": "user.model", "verifier_model": "user.verifier_model",
              "validator_model": "validator.model", "grader_model": "grader.model"}
RULE = ("PhysioNet's Credentialed Data Use Agreement forbids sharing credentialed data with third parties, including "
        "sending it through APIs; its LLM guidance allows an online model only with zero retention, no training and "
        "no human review (docs/concepts.md, Credentialed data)")


def check_choice(field: str, value, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        raise ConfigurationError(f"{field}={value!r}: must be one of {list(choices)} ({where} or the override)")
    return value


def network_class(host: str | None, resolve_s: float = 2.0) -> str:
    """`local` for a loopback, private or link-local address, or a name that resolves only to such addresses (a
    cluster service, a host on the user's network); `public` for anything else, a name that does not resolve
    included."""
    if host is None:
        return "local"
    host = host.lower().strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return "local"
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            infos = pool.submit(socket.getaddrinfo, host, None).result(timeout=resolve_s)
            addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
        except (OSError, FutureTimeout, ValueError):
            return "public"
        finally:
            pool.shutdown(wait=False)
    private = all(a.is_loopback or a.is_private or a.is_link_local for a in addresses)
    return "local" if addresses and private else "public"


def _scheme(location: str) -> str:
    """A URI's scheme ('' for a plain path; a Windows drive letter is a path too)."""
    scheme = urlsplit(location).scheme
    return "" if len(scheme) <= 1 else scheme.lower()


@dataclass(frozen=True)
class Source:
    """One database the run queries, and its data-use class."""
    db: str
    data_use: str
    file: str | None              # None: the synthetic world
    declared: bool                # data.<db>.data_use was set

    def describe(self) -> str:
        where = "the synthetic world" if self.file is None else f"your file {self.file}"
        return f"{self.db} {self.data_use} ({where}{', declared' if self.declared else ''})"


@dataclass(frozen=True)
class Endpoint:
    """Where one model (the roles it plays) is called, and its data-handling class."""
    roles: tuple[str, ...]
    key: str                      # where it is configured: model, user.model, grader.model, data.embedder, ...
    model: str
    host: str | None              # None: in this process (the scripted model, the local embedder)
    handling: str
    declared: bool                # <key>.data_handling was set
    base_url: bool                # the conf names its server (a host the class was read from)

    def describe(self) -> str:
        where = "in this process" if self.host is None else self.host
        how = "declared" if self.declared else ("its base_url" if self.base_url else "the provider's API")
        if self.host is None:
            how = "no endpoint"
        return f"{', '.join(self.roles)}: {self.model} at {where}, {self.handling} ({how})"


@dataclass(frozen=True)
class Store:
    """Somewhere the run writes what the models saw: the MLflow store, a response cache."""
    key: str
    location: str
    local: bool
    allowed: bool                 # local, or declared (tracking.credentialed_ok)


def model_endpoint(cfg: dict, roles: tuple[str, ...], key: str) -> Endpoint:
    """A model conf's endpoint: `data_handling` as declared, or (`auto`) read from its `base_url`."""
    declared = check_choice(f"{key}.data_handling", cfg.get("data_handling", AUTO), (AUTO, *HANDLING),
                            "conf/model/*.yaml")
    provider, base = cfg.get("provider"), cfg.get("base_url")
    name = str(cfg.get("name") or cfg.get("model"))
    if provider == "scripted":
        return Endpoint(roles, key, name, None, "local" if declared == AUTO else declared, declared != AUTO, False)
    host = urlsplit(base).hostname if base else PROVIDER_HOSTS.get(str(provider), str(provider))
    if declared == "local" and not base:
        raise ConfigurationError(f"{key}.data_handling=local: {name} has no {key}.base_url, so it is called at {host}, "
                                 f"a host you do not run; local is for a server you run (give {key}.base_url), "
                                 "zero_retention for a provider account you have checked")
    derived = network_class(host) if base else "public"
    return Endpoint(roles, key, name, host, derived if declared == AUTO else declared, declared != AUTO, bool(base))


def embedder_endpoint(embedder: dict) -> Endpoint:
    """The value index's embedding model: in this process (`local`, the default) or a provider's API."""
    provider = embedder.get("provider", "local")
    if provider == "local":
        cfg = {"provider": "scripted", "name": embedder.get("model") or "all-MiniLM-L6-v2",
               "data_handling": embedder.get("data_handling", AUTO)}
    else:
        cfg = {**embedder, "name": embedder.get("model") or f"{provider} embeddings"}
    return model_endpoint(cfg, ("embedder",), "data.embedder")


def store_of(key: str, location: str | None, declared_ok: bool = False) -> Store:
    """The MLflow store (None: the local one under tracking.root) or a cache folder, and whether it is local."""
    if not location:
        return Store(key, "this machine", True, True)
    scheme = _scheme(location)
    if location.split(":")[0].lower() in HOSTED_STORES:        # "databricks", "databricks://profile"
        local = False
    elif scheme in ("", "file", "sqlite"):
        local = True
    else:
        local = network_class(urlsplit(location).hostname) == "local"
    return Store(key, location, local, local or declared_ok)


@dataclass(frozen=True)
class Verdict:
    sources: tuple[Source, ...]
    endpoints: tuple[Endpoint, ...]
    stores: tuple[Store, ...]
    refusals: tuple[str, ...]

    @property
    def credentialed(self) -> bool:
        return any(s.data_use == "credentialed" for s in self.sources)

    @property
    def data_use(self) -> str:
        """The run's class: its most restricted source's."""
        return max((s.data_use for s in self.sources), key=DATA_USE.index, default="synthetic")

    def params(self) -> dict[str, str]:
        return {**{f"data_use.{s.db}": s.data_use for s in self.sources},
                **{f"data_handling.{role}": e.handling for e in self.endpoints for role in e.roles}}

    def tags(self) -> dict[str, str]:
        return {"ehrbench.data_use": self.data_use, **{f"ehrbench.{k}": v for k, v in self.params().items()}}

    def sentence(self) -> str:
        """For the run's description."""
        roles = ", ".join(f"{role} {e.handling}" for e in self.endpoints for role in e.roles) or "no model calls"
        return f"Data: {', '.join(f'{s.db} {s.data_use}' for s in self.sources)}; models: {roles}."

    def lines(self) -> list[str]:
        """What the run shows at start (and a dry run prints)."""
        out = [f"data use: {'; '.join(s.describe() for s in self.sources) or 'no database'}",
               f"model endpoints: {'; '.join(e.describe() for e in self.endpoints) or 'none'}"]
        if self.refusals:
            out.append("credentialed data check: REFUSED (see below)")
        elif self.credentialed:
            out.append("credentialed data check: passed; rows of it will be kept in " + ", ".join(
                f"{s.key} ({s.location})" for s in self.stores) + ", the run's records and reports under "
                "tracking.root and Ray's logs (docs/concepts.md, Credentialed data)")
        else:
            out.append(f"credentialed data check: not needed (the data is {self.data_use})")
        return out

    def refusal(self) -> str:
        sources = "; ".join(f"{s.db} ({s.file})" for s in self.sources if s.data_use == "credentialed")
        fixes = "\n".join(f"  - {r}" for r in self.refusals)
        declare = ", ".join(f"data.{s.db}.data_use=open" for s in self.sources if s.data_use == "credentialed")
        return (f"credentialed data would reach a place that may keep it. Credentialed: {sources}.\n{fixes}\n"
                f"{RULE}. If the file is public demo data (the MIMIC or eICU demo), declare it: {declare}.")


def _refusal_for(e: Endpoint) -> str:
    served = "model=vllm-qwen3-32b " if e.key == "model" else ""
    return (f"the {', '.join(e.roles)} role{'s' if len(e.roles) > 1 else ''} call{'' if len(e.roles) > 1 else 's'} "
            f"{e.model} at {e.host}, a public endpoint. Fix: serve a model yourself and point the role at it "
            f"({served}{e.key}.base_url=http://<a host you run>/v1), or, after checking that your account keeps "
            f"nothing (zero retention, no training, no human review), declare {e.key}.data_handling=zero_retention.")


def endpoints(bench: Benchmark, settings: TrialSettings, embedder: dict, keys: dict[str, str]) -> list[Endpoint]:
    """Every model endpoint the run's trials may call, each with the benchmark's roles that call it. A configured
    model none of the benchmark's `model_roles` names is checked too, under its field's roles."""
    by_field: dict[str, list[str]] = {}
    for role in bench.model_roles:
        if role in ROLE_MODELS and getattr(settings, field := settings.role_field(role)) is not None:
            by_field.setdefault(field, []).append(role)
    for field in settings.models():
        by_field.setdefault(field, [r for r, f in ROLE_MODELS.items() if f == field])
    out = [model_endpoint(getattr(settings, field), tuple(roles), keys.get(field, FIELD_KEYS[field]))
           for field, roles in by_field.items()]
    if "embedder" in bench.model_roles:
        out.append(embedder_endpoint(embedder or {}))
    return out


def source_class(db: str, data: DataOptions) -> str:
    """The rendered world is synthetic; a file of the user's own is credentialed unless declared otherwise."""
    declared = data.data_use.get(db, AUTO)
    if db not in data.files:
        return "synthetic"
    return "credentialed" if declared == AUTO else declared


def check(bench: Benchmark, settings: TrialSettings, data: DataOptions, tracking: TrackingOptions,
          keys: dict[str, str] | None = None, calling: set[str] | None = None) -> Verdict:
    """The run's verdict (`Verdict.refusals` empty: it may start). `keys` names where a field's model is configured
    when it is not the usual place (a grader chosen by `grader=auto`); `calling`, the roles that will reach their
    endpoint (a rescore replays the others from its records; None: all)."""
    sources = tuple(Source(db, source_class(db, data), data.files.get(db), data.data_use.get(db, AUTO) != AUTO)
                    for db in bench.resources().databases)
    found = tuple(endpoints(bench, settings, data.embedder, keys or {}))
    stores = [store_of("tracking.uri", tracking.uri, tracking.credentialed_ok)]
    for e_cfg, key in ((getattr(settings, f), FIELD_KEYS[f]) for f in settings.models()):
        if e_cfg.get("cache_dir"):
            stores.append(store_of(f"{key}.cache_dir", str(e_cfg["cache_dir"])))
    refusals: list[str] = []
    if any(s.data_use == "credentialed" for s in sources):
        refusals += [_refusal_for(e) for e in found
                     if e.handling == "public" and (calling is None or set(e.roles) & calling)]
        for s in stores:
            if not s.allowed:
                fix = ("use tracking=local, a server on loopback or your private network, or, for a server you "
                       "control under your data use agreement, tracking.credentialed_ok=true") \
                    if s.key == "tracking.uri" else "give a folder on this machine"
                refusals.append(f"{s.key}={s.location} would keep traces, judge prompts and records with rows of the "
                                f"data outside this machine and your private network. Fix: {fix}.")
    return Verdict(sources, found, tuple(stores), tuple(refusals))
