"""`rljob doctor` without Kueue (service/adapters/k8s_cluster/doctor_pools.py): the capacity label on the TPU node
pools, read from the nodes of a kmock cluster, with one failure planted at a time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client as k8s

from harness.kueue_cluster import TPU_LABELS, TPU_TAINT, KueueCluster, forbidden
from service.adapters.k8s.client import K8sClient
from service.adapters.k8s_cluster.doctor import run_doctor
from service.domain.self_check import CheckLine

from .conftest import NS, configuration_for, make_settings

pytestmark = pytest.mark.timeout(60)
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


def _node_labels(capacity: str | None, pool: str, **extra: str) -> dict[str, str]:
    labels = {**TPU_LABELS, "cloud.google.com/gke-nodepool": pool, **extra}
    if capacity is not None:
        labels["rljob.dev/capacity"] = capacity
    return labels


@pytest.fixture()
def pools(kmock: Any) -> KueueCluster:
    """No Kueue queue configured; TPU pools as docs/deploy-gke.md creates them: on-demand, spot, a reservation
    (flex-start scaled to zero, so no node)."""
    cluster = KueueCluster(kmock)
    for name in ("gke-tpu-od-1", "gke-tpu-spot-1"):
        cluster.drop("v1/nodes", name)
    cluster.put_node("od-0", _node_labels("on-demand", "v6e-8-od"), [TPU_TAINT])
    cluster.put_node("spot-0", _node_labels("spot", "v6e-8-spot", **{"cloud.google.com/gke-spot": "true"}), [TPU_TAINT, SPOT_TAINT])
    cluster.put_node("res-0", _node_labels("reservation", "v6e-8-res", **{"cloud.google.com/reservation-name": "rljob-v6e-8"}), [TPU_TAINT])
    cluster.put_node("cpu-0", {"cloud.google.com/gke-nodepool": "default-pool"}, [])  # not a TPU node: no label needed
    return cluster


async def doctor(cluster: KueueCluster, **settings: Any) -> dict[str, CheckLine]:
    api = k8s.ApiClient(configuration_for(cluster.server))
    client = K8sClient(core=k8s.CoreV1Api(api), batch=k8s.BatchV1Api(api), custom=k8s.CustomObjectsApi(api), namespace=NS, attempts=1)
    lines = await asyncio.to_thread(run_doctor, client, make_settings(**settings))
    return {ln.name: ln for ln in lines if ln.name.startswith("nodes")}


async def test_healthy_pools_are_ok_and_an_empty_flex_start_pool_only_warns(pools):
    lines = await doctor(pools)
    assert {n: ln.status for n, ln in lines.items()} == {
        "nodes rljob.dev/capacity=on-demand": "ok",
        "nodes rljob.dev/capacity=spot": "ok",
        "nodes rljob.dev/capacity=flex-start": "warn",
        "nodes rljob.dev/capacity=reservation": "ok",
    }
    assert "v6e-8-od" in lines["nodes rljob.dev/capacity=on-demand"].message
    assert "rljob-v6e-8" in lines["nodes rljob.dev/capacity=reservation"].message
    assert "as expected" in lines["nodes rljob.dev/capacity=flex-start"].message
    # With Kueue queues configured the flavors' check (doctor_kueue.py) reads the nodes instead.
    assert not [n for n in await doctor(pools, kueue_queue="team-ml") if n.startswith("nodes rljob.dev/capacity")]


async def test_a_reservation_node_without_its_reservation_name_fails(pools):
    pools.put_node("res-0", _node_labels("reservation", "v6e-8-res"), [TPU_TAINT])
    line = (await doctor(pools))["nodes rljob.dev/capacity=reservation"]
    assert line.status == "fail" and "res-0" in line.message and "cloud.google.com/reservation-name" in line.message
    assert "--reservation-affinity=specific" in line.fix


async def test_a_spot_node_without_gkes_spot_label_fails(pools):
    pools.put_node("spot-0", _node_labels("spot", "v6e-8-spot"), [TPU_TAINT, SPOT_TAINT])
    line = (await doctor(pools))["nodes rljob.dev/capacity=spot"]
    assert line.status == "fail" and "cloud.google.com/gke-spot=true" in line.message and "--spot" in line.fix


async def test_a_tpu_pool_without_the_capacity_label_warns(pools):
    pools.put_node("od-1", _node_labels(None, "v6e-8-forgotten"), [TPU_TAINT])
    line = (await doctor(pools))["nodes without rljob.dev/capacity"]
    assert line.status == "warn" and "od-1" in line.message and "v6e-8-forgotten" in line.message
    assert "--node-labels=rljob.dev/capacity=" in line.fix


async def test_a_capacity_value_that_is_no_kind_warns(pools):
    pools.put_node("od-2", _node_labels("ondemand", "v6e-8-typo"), [TPU_TAINT])
    line = (await doctor(pools))["nodes rljob.dev/capacity"]
    assert line.status == "warn" and "rljob.dev/capacity=ondemand" in line.message


async def test_no_on_demand_node_warns_that_default_jobs_may_stay_pending(pools):
    pools.drop("v1/nodes", "od-0")
    line = (await doctor(pools))["nodes rljob.dev/capacity=on-demand"]
    assert line.status == "warn" and "(the default) stay Pending" in line.message and "scaled to zero" in line.message


async def test_nodes_the_service_cannot_list_are_a_warning(pools):
    pools.server["get /api/v1/nodes"] << forbidden()
    lines = await doctor(pools)
    assert list(lines) == ["nodes rljob.dev/capacity"]
    line = lines["nodes rljob.dev/capacity"]
    assert line.status == "warn" and "cannot list nodes (403)" in line.message and "kubectl get nodes -L" in line.fix


async def test_nodes_the_role_does_not_grant_are_not_listed_at_all(pools):
    """Asked first (SelfSubjectAccessReview): the service makes no call its Role does not grant, even to be refused."""
    pools.denied.add(("nodes", "list"))
    lines = await doctor(pools)
    line = lines["nodes rljob.dev/capacity"]
    assert line.status == "warn" and "may not list nodes" in line.message and "kubectl get nodes -L" in line.fix
    assert not [r for r in pools.server if r.method == "GET" and r.url.path == "/api/v1/nodes"]
