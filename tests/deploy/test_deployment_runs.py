"""The service Deployment of each overlay, run: its container starts from the service image's ENTRYPOINT
(docker/service.Dockerfile) with the env the manifests give it (ConfigMap, fieldRef, the Secrets the guide
creates), under readOnlyRootFilesystem, answers its probes at their declared paths, and reaches the API
in-cluster (service-account token, HTTPS) to launch a trainer Job, all on the emulated cluster."""

from __future__ import annotations

import asyncio
import copy
import secrets as pysecrets
from pathlib import Path
from typing import Any

import pytest

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.manifests import spec as job_spec
from service.adapters.k8s_cluster.rbac_needs import GRANTED_TO_EVERY_USER
from tests.deploy.deploy_support import one
from tests.deploy.k8s_api_scan import role_rules
from tests.deploy.service_pod import applicable, documented_secrets, http_json, pod_from_deployment, rbac_rules_used, secret

pytestmark = pytest.mark.timeout(180)


def _namespace(objs: list[dict[str, Any]]) -> str:
    return one(objs, "Namespace")["metadata"]["name"]


def _container_status(cluster: EmulatedCluster, ns: str, name: str) -> dict[str, Any]:
    pod = cluster.get("Pod", ns, name) or {}
    return next(iter((pod.get("status") or {}).get("containerStatuses") or []), {})


def _pod_ready(cluster: EmulatedCluster, ns: str, name: str) -> bool:
    conds = ((cluster.get("Pod", ns, name) or {}).get("status") or {}).get("conditions") or []
    return {"type": "Ready", "status": "True"} in [{"type": c["type"], "status": c["status"]} for c in conds]


async def _apply(cluster: EmulatedCluster, objs: list[dict[str, Any]], values: dict[str, str]) -> dict[str, Any]:
    ns = _namespace(objs)
    for obj in applicable(objs):
        await cluster.create(obj)
    for name, key in documented_secrets().items():
        await cluster.create(secret(name, ns, key, values[name]))
    pod = pod_from_deployment(one(objs, "Deployment", "rljob-service"))
    await cluster.create(pod)
    return pod


@pytest.fixture(params=["dev", pytest.param("gke", marks=pytest.mark.postgres)])
def overlay(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(overlay, the database URL its rljob-db Secret holds): gke refuses anything but PostgreSQL."""
    if request.param == "gke":
        return "gke", request.getfixturevalue("postgres_server")
    return "dev", "sqlite:////unused/by/dev.db"


async def test_the_service_deployment_runs_and_launches_a_trainer_job(rendered, overlay, kmock, tmp_path: Path):
    name, db_url = overlay
    objs = rendered[name]
    ns = _namespace(objs)
    token = "deploy-" + pysecrets.token_hex(24)
    values = {"rljob-db": db_url, "rljob-api-tokens": token, "rljob-hf-token": "hf_test_token"}
    dep = one(objs, "Deployment", "rljob-service")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    startup = container["startupProbe"]
    async with EmulatedCluster(kmock, tmp_path / "node", tls=True) as cluster:
        pod = await _apply(cluster, objs, values)
        pod_name = pod["metadata"]["name"]
        # Ready within what the startup and readiness probes allow, first try (no restart).
        budget_s = startup["periodSeconds"] * startup["failureThreshold"] + container["readinessProbe"]["periodSeconds"]
        await cluster.wait_for(lambda: _pod_ready(cluster, ns, pod_name), "the service pod Ready", min(budget_s, 120))
        status = _container_status(cluster, ns, pod_name)
        assert status["restartCount"] == 0 and status["started"] is True, status
        runner = cluster.runner(ns, pod_name)
        port = runner._ports["service"][8000]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            code, _ = await asyncio.to_thread(http_json, port, container[probe]["httpGet"]["path"])
            assert code == 200, probe
        assert (await asyncio.to_thread(http_json, port, "/readyz"))[1]["ready"] is True
        env = runner.container_env("service")
        assert env["RLJOB_K8S_NAMESPACE"] == ns and env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
        assert not [k for k in env if k.startswith("RLJOB_SERVICE_")], "service links leak into the RLJOB_ settings"

        # Through the API with the bootstrap token from the Secret: a TPU job becomes a Job in the namespace.
        tutorial = job_spec("v6e-8", 8).model_dump(mode="json")
        code, body = await asyncio.to_thread(http_json, port, "/v1/jobs", token=token, body=tutorial)
        assert code == 201, body
        job_id = body["id"]
        job = await cluster.wait_for(lambda: cluster.get("Job", ns, job_id), "the trainer Job", 30)
        trainer = job["spec"]["template"]["spec"]["containers"][0]
        assert trainer["image"] == "rljob-trainer" and job["metadata"]["namespace"] == ns
        assert job["spec"]["template"]["spec"]["serviceAccountName"] == "rljob-trainer"
        # This node has no TPU: the service learns why over its watches (pods, events) and says so.
        pending = await cluster.wait_for(
            lambda: (
                "no node can run the trainer pod" in (http_json(port, f"/v1/jobs/{job_id}", token=token)[1] or {}).get("message", "")
                and http_json(port, f"/v1/jobs/{job_id}", token=token)[1]
            ),
            "the Unschedulable reason",
            60,
        )
        assert pending["phase"].lower() in ("launching", "pending")
        # Nothing the service did was refused by its read-only root filesystem.
        service_log = runner.log_path("service").read_text()
        assert "Read-only file system" not in service_log
        # RBAC is not enforced here, so check what the running service asked for against the Role.
        used = rbac_rules_used(kmock)
        assert {("batch", "jobs", "create"), ("", "pods", "watch"), ("", "events", "list")} <= used
        missing = used - role_rules(one(objs, "Role", "rljob-launcher")) - GRANTED_TO_EVERY_USER
        assert not missing, f"the service made API calls its Role does not grant: {sorted(missing)}"


@pytest.mark.parametrize(
    ("break_it", "reason", "message"),
    [
        (
            lambda c: c["env"][[e["name"] for e in c["env"]].index("RLJOB_DATABASE_URL")]["valueFrom"]["secretKeyRef"].update(key="ulr"),
            "CreateContainerConfigError",
            "couldn't find key ulr in Secret rljob/rljob-db",
        ),
        (
            lambda c: c["envFrom"][0]["configMapRef"].update(name="rljob-confg"),
            "CreateContainerConfigError",
            'configmap "rljob-confg" not found',
        ),
        (lambda c: c.update(command=["rljob-service"]), "StartError", 'exec: "rljob-service": executable file not found in $PATH'),
    ],
)
async def test_a_broken_manifest_fails_the_pod_as_a_kubelet_would(rendered, kmock, tmp_path: Path, break_it, reason, message):
    objs = copy.deepcopy(rendered["gke"])
    break_it(one(objs, "Deployment", "rljob-service")["spec"]["template"]["spec"]["containers"][0])
    values = {"rljob-db": "postgresql+psycopg://u@127.0.0.1:1/db", "rljob-api-tokens": "x" * 40, "rljob-hf-token": "t"}
    async with EmulatedCluster(kmock, tmp_path / "node", tls=True) as cluster:
        pod = await _apply(cluster, objs, values)
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]

        def failure() -> dict[str, Any] | None:
            # restartPolicy Always: a start error is soon the last state, behind CrashLoopBackOff.
            status = _container_status(cluster, ns, name)
            for state in (status.get("state") or {}, status.get("lastState") or {}):
                detail = state.get("waiting") or state.get("terminated") or {}
                if detail.get("reason") == reason:
                    return detail
            return None

        detail = await cluster.wait_for(failure, reason, 30)
        assert message in detail["message"]
        assert not _pod_ready(cluster, ns, name)
