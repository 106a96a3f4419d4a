"""Schema-level checks of k8s/: required fields, pinned images, resources, no inline secrets, and that the RayJob's
command is an ehrbench command that composes, the vLLM server serves what the model config asks for, and MLflow
has a SQL backend and an artifact store."""
import json
import shlex
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from .conftest import ROOT

K8S = ROOT / "k8s"
DOCS = [(p.name, d) for p in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def containers(doc: dict) -> list[dict]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "containers":
                    found.extend(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(doc)
    return found


def by_kind(kind: str, name: str | None = None) -> dict:
    [doc] = [d for _, d in DOCS if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


@pytest.mark.parametrize("name,doc", DOCS, ids=[f"{n}:{d['kind']}:{d['metadata']['name']}" for n, d in DOCS])
def test_every_object_is_complete(name, doc):
    assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]
    assert doc["metadata"]["namespace"] == "ehrbench", name
    for c in containers(doc):
        image = c["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][part]), f"{name}: {c['name']} needs {part}"
        for env in c.get("env", []):
            if any(s in env["name"].upper() for s in ("KEY", "PASSWORD", "TOKEN", "SECRET")):
                assert "valueFrom" in env and "value" not in env, f"{name}: {env['name']} must come from a Secret"


def test_rayjob_runs_the_evaluation_app_with_overrides_that_compose(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    job = by_kind("RayJob")
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["python", "jobs/evaluate.py"] and (ROOT / argv[1]).exists()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=argv[2:])
    assert cfg.runtime.name == "cluster" and cfg.runtime.address == "auto" and cfg.tracking.name == "server"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")               # as `ray job submit` / KubeRay set it
    assert cfg.runtime.address == "10.0.0.7:6379"
    assert cfg.tracking.uri == "http://mlflow.ehrbench.svc:5000"
    mlflow = by_kind("Service", "mlflow")["spec"]["ports"][0]["port"]
    assert cfg.tracking.uri.endswith(f":{mlflow}")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["workingDir"] == "/app"
    assert cfg.runtime.placement == "roles" and job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"][
        "num-cpus"] == "0"                                               # the head runs no trials
    offered = json.loads(json.loads(job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]
                                    ["resources"]))
    assert {"ehrbench_trials", "ehrbench_data", "ehrbench_users", "ehrbench_index"} <= set(offered)
    # a failed job runs again on a new cluster and resumes: its checkpoint is on the volume every pod mounts
    mounts = {m["mountPath"] for m in head["volumeMounts"]}
    assert job["spec"]["backoffLimit"] >= 1 and any(cfg.tracking.root.startswith(m + "/") for m in mounts)


def test_raycluster_has_cpu_workers_and_an_optional_gpu_group():
    groups = {g["groupName"]: g for g in by_kind("RayCluster")["spec"]["workerGroupSpecs"]}
    gpu = groups["gpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu["nvidia.com/gpu"] == "1" and groups["gpu"]["minReplicas"] == 0
    assert groups["cpu"]["minReplicas"] >= 1
    roles = {g: set(json.loads(json.loads(groups[g]["rayStartParams"]["resources"]))) for g in groups}
    assert {"ehrbench_trials", "ehrbench_data", "ehrbench_users", "ehrbench_index"} <= roles["cpu"]
    assert roles["gpu"] == {"ehrbench_index"}
    assert by_kind("RayCluster")["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"


def test_vllm_serves_the_model_the_config_names_with_tool_calling():
    model = yaml.safe_load((ROOT / "conf" / "model" / "vllm-qwen3-32b.yaml").read_text())
    args = by_kind("Deployment", "vllm")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--served-model-name={model['model']}" in args
    assert "--enable-auto-tool-choice" in args and any(a.startswith("--tool-call-parser=") for a in args)
    port = by_kind("Service", "vllm")["spec"]["ports"][0]["port"]
    assert f"--port={port}" in args and model["provider"] == "openai-compatible"


def test_mlflow_server_has_a_sql_backend_and_an_artifact_store():
    spec = by_kind("Deployment", "mlflow")["spec"]["template"]["spec"]
    command = " ".join(spec["containers"][0]["args"])
    assert "--backend-store-uri postgresql://" in command and "--artifacts-destination /mlartifacts" in command
    assert {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]} == {"mlflow-artifacts"}
    assert by_kind("Service", "mlflow-postgres")["spec"]["ports"][0]["port"] == 5432


def test_dockerfile_installs_the_project_and_points_hydra_at_its_configs():
    text = (K8S / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -e ." in text and "EHRBENCH_CONF_DIR=/app/conf" in text
    assert Path(ROOT / "jobs" / "evaluate.py").exists()


def test_every_ray_pod_mounts_the_shared_volume_where_the_data_and_index_cache_resolve(monkeypatch):
    """An actor whose node is lost restarts on another node and reopens its files (tests/test_multinode.py): every
    head and worker pod mounts one ReadWriteMany claim, and data.root and data.index_cache resolve into it."""
    claim = by_kind("PersistentVolumeClaim", "ehrbench-data")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for kind in ("RayCluster", "RayJob"):
        spec = by_kind(kind)["spec"]
        spec = spec.get("rayClusterSpec", spec)
        for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            pod = group["template"]["spec"]
            [volume] = [v["name"] for v in pod["volumes"] if v["persistentVolumeClaim"]["claimName"] == "ehrbench-data"]
            [container] = pod["containers"]
            [mount] = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume]
            env = {e["name"]: e["value"] for e in container["env"]}
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
                cfg = compose("config")
            assert cfg.data.root.startswith(mount + "/") and cfg.data.index_cache.startswith(mount + "/"), kind
