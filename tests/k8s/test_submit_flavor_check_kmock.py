"""The submit-time Kueue check on kmock: the team's LocalQueue -> ClusterQueue -> ResourceFlavors, read with
the real client, against the job's rendered pod template. Plus Kueue < 0.15 / no RBAC in a QUEUED message."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import kmock as kmock_lib
import pytest
from fastapi.testclient import TestClient

from harness.kueue_cluster import KUEUE, NS, KueueCluster, active, forbidden, not_found
from service.adapters.k8s.launcher import K8sJobLauncher, build_k8s_launcher
from service.app import create_app
from service.domain.records.errors import InvalidRequest
from service.domain.records.ports import ObservedState

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
    server[f"get /apis/{KUEUE}/clusterqueues/rljob-v6e"] << forbidden('clusterqueues.kueue.x-k8s.io "rljob-v6e" is forbidden')
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
        cluster.server[kmock_lib.resource("kueue.x-k8s.io", "v1beta2", "workloads")] << forbidden()
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


def _tpu(capacity: Any, **extra: Any) -> dict[str, Any]:
    return {
        "accelerator": "v6e-8",
        "chips_per_vm": 8,
        "capacity": capacity,
        "rollout_data_parallelism": 1,
        "rollout_tensor_parallelism": -1,
        **extra,
    }


def _set_quota(cluster: KueueCluster, resource: str, quota: Any) -> None:
    """The healthy ClusterQueue with `resource`'s nominalQuota set in every flavor."""
    obj = cluster.server.objects[f"{KUEUE}/clusterqueues", None, "rljob-v6e"]
    spec = copy.deepcopy(dict(obj.raw["spec"]))
    for flavor in spec["resourceGroups"][0]["flavors"]:
        for res in flavor["resources"]:
            if res["name"] == resource:
                res["nominalQuota"] = quota
    cluster.put(f"{KUEUE}/clusterqueues", "rljob-v6e", {"spec": spec, "status": active()})


async def test_a_capacity_set_no_flavor_takes_is_refused_naming_each_flavor_and_why(kueue_cluster):
    """[flex-start, reservation]: the pod selects by required node affinity, one term per kind; Kueue cuts each term
    to a flavor's own keys, and neither the on-demand nor the spot flavor matches any term."""
    exc = await _refusal(_launcher(kueue_cluster.server), hardware=_tpu(["flex-start", "reservation"], reservation="tpu-res-1"))
    assert exc is not None and exc.loc == ("hardware",)
    msg = str(exc)
    assert "no flavor of ClusterQueue rljob-v6e (LocalQueue team-ml) can take this job" in msg
    assert "one of [rljob.dev/capacity=flex-start | rljob.dev/capacity=reservation and cloud.google.com/reservation-name=tpu-res-1]" in msg
    assert (
        "tpu-v6e-2x4-on-demand (capacity on-demand, 8 google.com/tpu): it labels rljob.dev/capacity=on-demand, "
        "which no term of the job's node affinity matches"
    ) in msg
    assert (
        "tpu-v6e-2x4-spot (capacity spot, 16 google.com/tpu): it labels rljob.dev/capacity=spot, "
        "which no term of the job's node affinity matches"
    ) in msg


@pytest.mark.parametrize("capacity", [["flex-start", "spot"], ["reservation", "on-demand"], ["spot", "on-demand"]])
async def test_a_capacity_set_passes_when_one_kind_has_a_flavor(kueue_cluster, capacity):
    hardware = _tpu(capacity, **({"reservation": "tpu-res-1"} if "reservation" in capacity else {}))
    assert await _refusal(_launcher(kueue_cluster.server), hardware=hardware) is None


async def test_a_capacity_set_whose_only_matching_flavor_is_too_small_is_refused(kueue_cluster):
    _set_quota(kueue_cluster, "google.com/tpu", 4)
    exc = await _refusal(_launcher(kueue_cluster.server), hardware=_tpu(["flex-start", "on-demand"]))
    assert exc is not None and exc.loc == ("hardware",)
    assert "tpu-v6e-2x4-on-demand (capacity on-demand, 4 google.com/tpu): its google.com/tpu quota is 4, the job needs 8" in str(exc)


@pytest.mark.parametrize(
    ("resource", "quota", "says"),
    [
        ("cpu", 100, "its cpu quota is 100, the job needs 160 (1 pod(s) x 160)"),
        ("memory", "1000Gi", "its memory quota is 1000Gi, the job needs 1280Gi (1 pod(s) x 1280Gi)"),
    ],
)
async def test_a_cpu_or_memory_quota_below_the_pods_request_is_refused_naming_it(kueue_cluster, resource, quota, says):
    """Kueue's flavor assigner checks every requested resource of the group against the flavor's quota: a pod
    asking 160 cpu / 1280Gi never fits a flavor with less, however many TPU chips it has."""
    _set_quota(kueue_cluster, resource, quota)
    launcher = _launcher(kueue_cluster.server)
    exc = await _refusal(launcher, hardware=_tpu(["spot", "on-demand"]))  # both flavors match: quota alone refuses
    assert exc is not None and exc.loc == ("hardware",)
    msg = str(exc)
    assert "no flavor of ClusterQueue rljob-v6e (LocalQueue team-ml) can take this job" in msg
    assert f"tpu-v6e-2x4-on-demand (capacity on-demand, 8 google.com/tpu): {says}" in msg
    assert f"tpu-v6e-2x4-spot (capacity spot, 16 google.com/tpu): {says}" in msg


async def test_memory_in_its_own_resource_group_is_checked_against_that_groups_flavor(kueue_cluster):
    """cpu and TPU in the flavors' group, memory in a second group with a labelless flavor: the memory request
    meets that flavor's quota, not the TPU flavors'."""
    cluster = kueue_cluster
    cluster.put(f"{KUEUE}/resourceflavors", "default-memory", {"spec": {}})

    def put(memory: str) -> None:
        obj = cluster.server.objects[f"{KUEUE}/clusterqueues", None, "rljob-v6e"]
        spec = copy.deepcopy(dict(obj.raw["spec"]))
        tpu_group = spec["resourceGroups"][0]
        tpu_group["coveredResources"] = ["cpu", "google.com/tpu"]
        for flavor in tpu_group["flavors"]:
            flavor["resources"] = [r for r in flavor["resources"] if r["name"] != "memory"]
        mem = {"name": "default-memory", "resources": [{"name": "memory", "nominalQuota": memory}]}
        spec["resourceGroups"] = [tpu_group, {"coveredResources": ["memory"], "flavors": [mem]}]
        cluster.put(f"{KUEUE}/clusterqueues", "rljob-v6e", {"spec": spec, "status": active()})

    put("1Ti")
    exc = await _refusal(_launcher(cluster.server))
    assert exc is not None and exc.loc == ("hardware",)
    assert "default-memory (capacity any, 1Ti memory): its memory quota is 1Ti, the job needs 1280Gi" in str(exc)
    put("2Ti")
    assert await _refusal(_launcher(cluster.server)) is None


async def test_a_requested_resource_no_resource_group_covers_is_refused(kueue_cluster):
    """Kueue: "resource memory unavailable in ClusterQueue"; the job would wait forever."""
    obj = kueue_cluster.server.objects[f"{KUEUE}/clusterqueues", None, "rljob-v6e"]
    spec = copy.deepcopy(dict(obj.raw["spec"]))
    group = spec["resourceGroups"][0]
    group["coveredResources"] = ["cpu", "google.com/tpu"]
    for flavor in group["flavors"]:
        flavor["resources"] = [r for r in flavor["resources"] if r["name"] != "memory"]
    kueue_cluster.put(f"{KUEUE}/clusterqueues", "rljob-v6e", {"spec": spec, "status": active()})
    exc = await _refusal(_launcher(kueue_cluster.server))
    assert exc is not None and exc.loc == ("hardware",)
    msg = str(exc)
    assert "ClusterQueue rljob-v6e (LocalQueue team-ml) has no resource group covering memory" in msg
    assert "resource memory unavailable in ClusterQueue" in msg and "requests 1280Gi memory" in msg
