"""The submit-time Kueue check on kmock: the team's LocalQueue -> ClusterQueue -> ResourceFlavors, read with
the real client, against the job's rendered pod template. Plus Kueue < 0.15 / no RBAC in a QUEUED message."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kmock as kmock_lib
import pytest
from fastapi.testclient import TestClient

from harness.kueue_cluster import KUEUE, NS, KueueCluster, active, not_found
from service.adapters.k8s.launcher import K8sJobLauncher, build_k8s_launcher
from service.app import create_app
from service.domain.errors import InvalidRequest
from service.domain.ports import ObservedState

from .conftest import JOB_ID, configuration_for, make_settings, make_spec
from .test_service_integration import AUTH, NoProgress, _settings, _wait

pytestmark = pytest.mark.timeout(60)
TEAM_QUEUES = {"ml": "team-ml"}


@pytest.fixture()
def kueue_cluster(kmock: Any) -> KueueCluster:
    return KueueCluster(kmock)


def _launcher(server: Any, clock: Any = None, **overrides: Any) -> K8sJobLauncher:
    settings = make_settings(kueue_team_queues=TEAM_QUEUES, **overrides)
    return build_k8s_launcher(
        settings, sleep=lambda s: None, configuration=configuration_for(server), **({"clock": clock} if clock else {})
    )


async def _refusal(launcher: K8sJobLauncher, **spec: Any) -> InvalidRequest | None:
    try:
        await asyncio.to_thread(launcher.check_submittable, make_spec(team="ml", **spec))
    except InvalidRequest as exc:
        return exc
    return None


def _reads(server: Any, plural: str) -> int:
    return len([r for r in server if r.method == "GET" and r.resource and r.resource.plural == plural])


async def test_a_job_a_flavor_can_take_passes(kueue_cluster):
    launcher = _launcher(kueue_cluster.server)
    assert await _refusal(launcher) is None  # on-demand v6e-8: 8 chips, quota 8
    assert (
        await _refusal(
            launcher,
            hardware={
                "accelerator": "v6e-8",
                "chips_per_vm": 8,
                "capacity": "spot",
                "rollout_data_parallelism": 1,
                "rollout_tensor_parallelism": -1,
            },
        )
        is None
    )


async def test_a_capacity_no_flavor_offers_is_refused_naming_the_flavors(kueue_cluster):
    launcher = _launcher(kueue_cluster.server)
    exc = await _refusal(
        launcher,
        hardware={
            "accelerator": "v6e-8",
            "chips_per_vm": 8,
            "capacity": "flex-start",
            "rollout_data_parallelism": 1,
            "rollout_tensor_parallelism": -1,
        },
    )
    assert exc is not None and exc.loc == ("hardware",)
    msg = str(exc)
    assert "no flavor of ClusterQueue rljob-v6e (LocalQueue team-ml)" in msg
    assert "rljob.dev/capacity=flex-start" in msg and "needs 8 google.com/tpu (1 pod(s) x 8)" in msg
    assert "tpu-v6e-2x4-on-demand (capacity on-demand, 8 google.com/tpu)" in msg
    assert "tpu-v6e-2x4-spot (capacity spot, 16 google.com/tpu)" in msg


async def test_a_job_larger_than_every_flavors_quota_is_refused(kueue_cluster):
    flavors = kueue_cluster.server.objects[f"{KUEUE}/clusterqueues", None, "rljob-v6e"]
    spec = dict(flavors.raw["spec"])
    spec["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = 4
    flavors.patch({"spec": spec})
    exc = await _refusal(_launcher(kueue_cluster.server))
    assert exc is not None and exc.loc == ("hardware",)
    assert "its google.com/tpu quota is 4, the job needs 8" in str(exc)


async def test_a_missing_local_queue_is_refused(kueue_cluster):
    server = kueue_cluster.server
    server[f"get /apis/{KUEUE}/namespaces/{NS}/localqueues/team-ml"] << not_found("localqueues", "team-ml")
    exc = await _refusal(_launcher(server))
    assert exc is not None and exc.loc == ("team",) and "LocalQueue team-ml does not exist in namespace rljob" in str(exc)


async def test_an_inactive_cluster_queue_is_refused_quoting_kueue(kueue_cluster):
    kueue_cluster.put_cluster_queue(status=active("False", "Stopped", "The ClusterQueue is stopped"))
    exc = await _refusal(_launcher(kueue_cluster.server))
    assert exc is not None and exc.loc == ("team",)
    assert "ClusterQueue rljob-v6e (of LocalQueue team-ml) is inactive, Kueue says Stopped: The ClusterQueue is stopped" in str(exc)


async def test_unreadable_kueue_objects_do_not_refuse_and_warn_once(kueue_cluster, caplog):
    server = kueue_cluster.server
    server[f"get /apis/{KUEUE}/clusterqueues/rljob-v6e"] << kmock_lib.Response(
        status=403,
        payload={
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
            "message": 'clusterqueues.kueue.x-k8s.io "rljob-v6e" is forbidden',
        },
    )
    now = [0.0]
    launcher = _launcher(server, clock=lambda: now[0])
    flex = {
        "accelerator": "v6e-8",
        "chips_per_vm": 8,
        "capacity": "flex-start",
        "rollout_data_parallelism": 1,
        "rollout_tensor_parallelism": -1,
    }
    with caplog.at_level(logging.WARNING, logger="service.adapters.k8s.launcher"):
        for _ in range(3):
            assert await _refusal(launcher, hardware=flex) is None
            now[0] += 31  # past the cache: read again, still unreadable, still one warning
    warnings = [r for r in caplog.records if "cannot check jobs against Kueue's flavors" in r.getMessage()]
    assert len(warnings) == 1 and "forbidden by RBAC" in warnings[0].getMessage()


async def test_the_queue_chain_is_cached_for_a_burst(kueue_cluster):
    now = [0.0]
    launcher = _launcher(kueue_cluster.server, clock=lambda: now[0])
    for _ in range(5):
        assert await _refusal(launcher) is None
    assert (_reads(kueue_cluster.server, "localqueues"), _reads(kueue_cluster.server, "clusterqueues")) == (1, 1)
    now[0] += 31
    assert await _refusal(launcher) is None
    assert _reads(kueue_cluster.server, "localqueues") == 2


async def test_the_service_answers_422_with_the_field_and_stores_nothing(kueue_cluster, tmp_path):
    def scenario() -> None:
        app = create_app(_settings(tmp_path), launcher=_launcher(kueue_cluster.server), progress=NoProgress())
        with TestClient(app) as client:
            _wait(lambda: client.get("/readyz").status_code == 200, "ready")
            body = make_spec(
                hardware={
                    "accelerator": "v6e-8",
                    "chips_per_vm": 8,
                    "capacity": "flex-start",
                    "rollout_data_parallelism": 1,
                    "rollout_tensor_parallelism": -1,
                }
            )
            resp = client.post("/v1/jobs", json=body.model_dump(mode="json"), headers=AUTH)
            assert resp.status_code == 422, resp.text
            (detail,) = resp.json()["detail"]
            assert detail["loc"] == ["hardware"] and "no flavor of ClusterQueue rljob-v6e" in detail["msg"]
            assert client.get("/v1/jobs", headers=AUTH).json()["count"] == 0

    await asyncio.to_thread(scenario)
    assert not [r for r in kueue_cluster.server if r.method == "POST" and r.resource and r.resource.plural == "jobs"]


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (404, "the kueue.x-k8s.io/v1beta2 API is not served (Kueue is missing or older than 0.15): install Kueue >= 0.15"),
        (403, "RBAC: the Role rljob-launcher needs apiGroups [kueue.x-k8s.io] resources [workloads] verbs [list]"),
    ],
)
async def test_a_queued_job_says_why_kueue_cannot_be_read(cluster, make_launcher, status, says):
    if status == 403:
        cluster.server.resources[f"{KUEUE}/workloads"] = {"namespaced": True}
        cluster.server[kmock_lib.resource("kueue.x-k8s.io", "v1beta2", "workloads")] << kmock_lib.Response(
            status=403, payload={"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403}
        )
    launcher = make_launcher(kueue_queue="tpu-queue")
    await asyncio.to_thread(launcher.launch, JOB_ID, make_spec())
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert (obs.state, obs.reason) == (ObservedState.QUEUED, "KueueNotAdmitted")
    assert says in obs.message and "`rljob doctor` checks" in obs.message
    other = 403 if status == 404 else 404
    assert ("not served" in obs.message) is (other == 403)


@pytest.mark.parametrize("capacity", ["spot", "flex-start", "reservation"])
async def test_a_cpu_job_asking_for_tpu_capacity_is_a_422_naming_hardware_capacity_and_stores_nothing(kueue_cluster, tmp_path, capacity):
    """Only TPU pools carry a capacity: such a cpu pod would select TPU nodes it cannot tolerate and wait forever."""
    hardware = {"accelerator": "cpu", "rollout_engine": "jax", "capacity": capacity}
    if capacity == "reservation":
        hardware["reservation"] = "tpu-res-1"

    def scenario() -> None:
        app = create_app(_settings(tmp_path), launcher=_launcher(kueue_cluster.server), progress=NoProgress())
        with TestClient(app) as client:
            _wait(lambda: client.get("/readyz").status_code == 200, "ready")
            body = make_spec(hardware=hardware).model_dump(mode="json")
            resp = client.post("/v1/jobs", json=body, headers=AUTH)
            assert resp.status_code == 422, resp.text
            (detail,) = resp.json()["detail"]
            assert detail["loc"] == ["body", "hardware", "capacity"] and f"capacity {capacity} is a kind of TPU node pool" in detail["msg"]
            assert client.get("/v1/jobs", headers=AUTH).json()["count"] == 0
            on_demand = {**body, "hardware": {"accelerator": "cpu", "rollout_engine": "jax"}}
            assert client.post("/v1/jobs", json=on_demand, headers=AUTH).status_code == 201  # the same job on on-demand runs

    await asyncio.to_thread(scenario)
