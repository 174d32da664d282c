"""Trainer workloads as the service renders them, with the container's command swapped for a tiny fake
(`python -c ...`) so that Job semantics can be exercised in seconds; everything else is the real manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.podrun.controllers.scheduling import Node
from harness.podrun.pods.images import ROOT
from service.adapters.k8s import K8sSettings
from service.adapters.k8s.render import render_manifests
from trainer.contract import JobSpec

NS = "rljob"


def settings(**overrides: Any) -> K8sSettings:
    values: dict[str, Any] = {
        "namespace": NS,
        "image": "us-docker.pkg.dev/example-project/rljob/trainer:0.1.0",
        "cpu_job_cpu": "500m",
        "cpu_job_memory": "512Mi",
        "cpu_job_shm_size": "64Mi",
    }
    values.update(overrides)
    return K8sSettings(**{"_env_file": None, **values})  # no .env file: only what the test says


def spec(accelerator: str = "cpu", chips_per_vm: int = 1, output: str = "gs://example-bucket/rljob") -> JobSpec:
    hardware: dict[str, Any] = {"accelerator": accelerator, "chips_per_vm": chips_per_vm}
    if accelerator == "cpu":
        hardware.update(rollout_engine="jax", rollout_data_parallelism=1, rollout_tensor_parallelism=1)
    return JobSpec.model_validate(
        {"name": "fake", "model": {"source": "org/model"}, "dataset": {"name": "org/data"}, "hardware": hardware, "output": output}
    )


def workload(job_id: str, command: list[str], *, job_spec: JobSpec | None = None, **setting_overrides: Any) -> list[dict[str, Any]]:
    """[spec ConfigMap, Job or JobSet] as the launcher creates them, with `command` in the trainer container."""
    config_map, main = render_manifests(job_spec or spec(), job_id, settings(**setting_overrides))
    if main["kind"] == "Job":
        pod = main["spec"]["template"]["spec"]
    else:
        pod = main["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["command"] = command
    return [config_map, main]


def service_accounts() -> list[dict[str, Any]]:
    """k8s/base/serviceaccounts.yaml, in the test namespace."""
    docs = list(yaml.safe_load_all((ROOT / "k8s" / "base" / "serviceaccounts.yaml").read_text()))
    return [{**d, "metadata": {**d["metadata"], "namespace": NS}} for d in docs if d]


def tpu_node(topology: str = "4x4", machine_type: str = "ct6e-standard-4t", chips: int = 16) -> Node:
    """A node that looks like (all of) a TPU v6e pool: labels, taint and google.com/tpu, for fake commands."""
    return Node.local(
        labels={
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": topology,
            "node.kubernetes.io/instance-type": machine_type,
            "rljob.dev/capacity": "on-demand",
        },
        taints=[{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}],
        allocatable={"cpu": "1000", "memory": "10Ti", "google.com/tpu": str(chips), "pods": "110"},
    )


def shared_dir(tmp_path: Path) -> Path:
    path = tmp_path / "shared"
    path.mkdir(exist_ok=True)
    return path
