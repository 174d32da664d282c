"""Fixtures for the Kubernetes backend tests: specs, settings, and a kmock "cluster".

kmock is a real HTTP server emulating the Kubernetes API; the real `kubernetes` client talks to it.
It has no controllers, so `FakeCluster` plays the Job controller and the kubelet: it creates pods,
patches statuses and serves logs, all through kmock's HTTP API so that watches see the changes.
The client is synchronous, so tests call it through `asyncio.to_thread` while kmock serves on the
event loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import queue
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock as kmock_lib
import pytest
import pytest_asyncio
from kubernetes import client as k8s

from service.adapters.k8s import K8sSettings
from service.adapters.k8s.launcher import K8sJobLauncher, build_k8s_launcher
from service.domain.records.ports import Observation, ObservedState
from trainer.contract import JobSpec

NS = "rljob"
JOB_ID = "rl-0123456789ab"
RESOURCES = ("batch/v1/jobs", "v1/pods", "v1/events", "v1/configmaps", "jobset.x-k8s.io/v1alpha2/jobsets")
WAIT_S = 10.0


def make_spec(accelerator: str = "v6e-8", chips_per_vm: int = 8, **extra: Any) -> JobSpec:
    """The tutorial's spec (examples/tutorial-llama31-8b-v6e8.yaml), built in code."""
    return JobSpec.model_validate(
        {
            "name": "tutorial-llama31-8b",
            "model": {"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B-Instruct"},
            "dataset": {"name": "openai/gsm8k"},
            "grpo": {"num_batches": 50, "num_test_batches": 10},
            "hardware": {
                "accelerator": accelerator,
                "chips_per_vm": chips_per_vm,
                "rollout_data_parallelism": 1,
                "rollout_tensor_parallelism": -1,
            },
            "output": "gs://example-bucket/rljob",
            **extra,
        }
    )


def make_cpu_spec(**extra: Any) -> JobSpec:
    """examples/tiny-cpu.yaml's hardware, with local paths under /data/rljob (a node directory)."""
    return JobSpec.model_validate(
        {
            "name": "tiny-cpu",
            "model": {"source": "/data/rljob/tiny/model", "dtype": "float32"},
            "dataset": {"train_files": ["/data/rljob/tiny/data/train.jsonl"], "eval_files": ["/data/rljob/tiny/data/test.parquet"]},
            "grpo": {
                "num_batches": 3,
                "num_test_batches": 1,
                "batch_size": 2,
                "num_generations": 2,
                "rewards": {"functions_path": "/data/rljob/tiny/length_reward.py", "functions": ["completion_length_reward"]},
            },
            "hardware": {
                "accelerator": "cpu",
                "chips_per_vm": 1,
                "rollout_engine": "jax",
                "rollout_data_parallelism": 1,
                "rollout_tensor_parallelism": 1,
            },
            "output": "/data/rljob/runs",
            **extra,
        }
    )


def make_eval_spec(of_job: str | None = "rl-trained00001", **extra: Any) -> JobSpec:
    """An eval job (JobSpec.evaluation): the built-in arith suite on a training job's Hugging Face export."""
    checkpoint: dict[str, Any] = {"format": "huggingface", "label": "export" if of_job else "base"}
    if of_job:
        checkpoint["job_id"] = of_job
    body: dict[str, Any] = {
        "name": "eval-arith",
        "model": {"source": "gs://example-bucket/rljob/runs/rl-trained00001/export"},
        "hardware": {
            "accelerator": "cpu",
            "chips_per_vm": 1,
            "rollout_engine": "jax",
            "rollout_data_parallelism": 1,
            "rollout_tensor_parallelism": 1,
        },
        "output": "gs://example-bucket/rljob",
        "evaluation": {"suite": {"name": "arith"}, "checkpoint": checkpoint},
    }
    return JobSpec.model_validate({**body, **extra})


def make_settings(**overrides: Any) -> K8sSettings:
    values: dict[str, Any] = {
        "namespace": NS,
        "image": "us-docker.pkg.dev/example-project/rljob/trainer:0.1.0",
        "service_account": "rljob-trainer",
        "watch_timeout_s": 1,
        "watch_resync_interval_s": 0.3,
        "request_timeout_s": 5.0,
        "retry_backoff_s": 0.01,
        "retry_backoff_max_s": 0.05,
    }
    values.update(overrides)
    # _env_file=None and explicit values: the developer's RLJOB_K8S_* environment cannot leak in.
    return K8sSettings(_env_file=None, **values)


@pytest.fixture()
def spec() -> JobSpec:
    return make_spec()


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeCluster:
    """Plays the Job controller and the kubelet against kmock, through its HTTP API."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.logs: dict[str, list[str]] = {}
        self._pods = 0

    async def _send(self, method: str, path: str, body: Any = None) -> Any:
        async with self.server.request(method, path, json=body) as resp:
            data = await resp.json(content_type=None)
            assert resp.status < 300, (method, path, resp.status, data)
            return data

    def job(self, name: str = JOB_ID) -> dict[str, Any] | None:
        key = (kmock_lib.resource("batch", "v1", "jobs"), NS, name)
        if key not in self.server.objects or self.server.objects[key].deleted:
            return None
        return dict(self.server.objects[key].raw)

    async def patch_job(self, patch: dict[str, Any], name: str = JOB_ID) -> None:
        await self._send("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/{name}", patch)

    async def set_job_conditions(self, *conditions: dict[str, Any], **status: Any) -> None:
        conds = [{"status": "True", "lastTransitionTime": _now(), **c} for c in conditions]
        await self.patch_job({"status": {"conditions": conds, **status}})

    async def create_pod(self, *, phase: str = "Pending", job_id: str = JOB_ID, **status: Any) -> str:
        self._pods += 1
        name = f"{job_id}-{self._pods:05d}"
        labels = {"app.kubernetes.io/managed-by": "rljob", "rljob.dev/job-id": job_id, "job-name": job_id}
        container = {
            "name": "trainer",
            "image": "us-docker.pkg.dev/example-project/rljob/trainer:0.1.0",
            "resources": {"limits": {"memory": "1280Gi", "google.com/tpu": "8"}},
        }
        await self._send(
            "POST",
            f"/api/v1/namespaces/{NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "labels": labels, "creationTimestamp": f"2026-11-30T00:{self._pods:02d}:00Z"},
                "spec": {
                    "containers": [container],
                    "nodeSelector": {
                        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                        "cloud.google.com/gke-tpu-topology": "2x4",
                        "node.kubernetes.io/instance-type": "ct6e-standard-8t",
                    },
                },
                "status": {"phase": phase, **status},
            },
        )
        return name

    async def patch_pod(self, name: str, status: dict[str, Any]) -> None:
        await self._send("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}", {"status": status})

    async def run_pod(self, name: str) -> None:
        await self.patch_pod(
            name,
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "trainer", "ready": True, "restartCount": 0, "image": "i", "imageID": "", "state": {"running": {}}}
                ],
            },
        )

    async def end_pod(self, name: str, exit_code: int, reason: str = "Error", **extra: Any) -> None:
        await self.patch_pod(
            name,
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": "trainer",
                        "ready": False,
                        "restartCount": 0,
                        "image": "i",
                        "imageID": "",
                        "state": {"terminated": {"exitCode": exit_code, "reason": reason}},
                    }
                ],
                **extra,
            },
        )

    async def event(self, pod: str, reason: str, message: str) -> None:
        self._pods += 1
        await self._send(
            "POST",
            f"/api/v1/namespaces/{NS}/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{pod}.{self._pods}", "namespace": NS},
                "involvedObject": {"kind": "Pod", "name": pod, "namespace": NS},
                "reason": reason,
                "message": message,
                "type": "Warning",
                "lastTimestamp": _now(),
            },
        )


@pytest_asyncio.fixture()
async def cluster(kmock: Any) -> AsyncIterator[FakeCluster]:
    for res in RESOURCES:
        kmock.resources[res] = {"namespaced": True, "verbs": ["list", "watch", "get", "create", "patch", "delete"]}

    def api_server_defaults(request: Any) -> Any:
        # kmock stores what it is sent; a real API server also stamps a uid (the launcher uses it
        # for the ConfigMap's ownerReference) and a creationTimestamp.
        meta = request.data.get("metadata", {})
        obj = kmock.objects[request.resource, request.namespace or meta.get("namespace"), meta["name"]]
        if not obj.get("metadata", {}).get("uid"):
            obj.patch({"metadata": {"uid": str(uuid.uuid4()), "creationTimestamp": meta.get("creationTimestamp") or _now()}})
        return dict(obj.raw)

    kmock[kmock_lib.action.CREATE] << 201 << api_server_defaults  # 201 Created, as the API answers
    yield FakeCluster(kmock)


def configuration_for(server: Any) -> k8s.Configuration:
    cfg = k8s.Configuration()
    cfg.host = str(server.url).rstrip("/")
    cfg.retries = False  # retries are the wrapper's job (and tests must not wait on urllib3's)
    return cfg


@pytest.fixture()
def make_launcher(cluster: FakeCluster) -> Callable[..., K8sJobLauncher]:
    def factory(**overrides: Any) -> K8sJobLauncher:
        return build_k8s_launcher(make_settings(**overrides), sleep=lambda s: None, configuration=configuration_for(cluster.server))

    return factory


class Recorder:
    """An ObservationSink with bounded waits."""

    def __init__(self) -> None:
        self.items: queue.Queue[Observation] = queue.Queue(maxsize=1000)
        self.seen: list[Observation] = []

    def __call__(self, obs: Observation) -> None:
        self.items.put_nowait(obs)

    async def wait_for(
        self, state: ObservedState, *, timeout_s: float = WAIT_S, where: Callable[[Observation], bool] = lambda o: True
    ) -> Observation:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                obs = self.items.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.02)
                continue
            self.seen.append(obs)
            if obs.state is state and where(obs):
                return obs
        raise AssertionError(f"no {state} observation within {timeout_s}s; saw {[(o.state, o.reason) for o in self.seen]}")


@pytest.fixture()
def recorder() -> Recorder:
    return Recorder()
