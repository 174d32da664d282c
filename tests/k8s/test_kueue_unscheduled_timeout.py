"""Issue 55 section 2 on the emulated cluster: Kueue v0.20's waitForPodsReady.unscheduledTimeout evicts a job whose
pods cannot be scheduled in the flavor it was admitted to, requeues it after backoff, and Kueue admits it again
from the FIRST flavor of its resource group (harness/podrun/kueue/podsready.py says where upstream decides each).

The pool: the shipped k8s/kueue/ objects (flavors in the order reservation, spot, on-demand, flex-start), one
reservation node made without the `cloud.google.com/reservation-name` label the reservation flavor names (so every
pod admitted there is Unschedulable) and one spot node. The job asks for [reservation, spot]. Upstream requeues an
evicted Workload as a new queue entry with no flavor-scan progress, so it lands on the reservation flavor again,
is evicted again, and so on until backoffLimitCount deactivates it (or forever without one): Kueue alone never
moves it to spot. rljob's service has to (the test records the loop, it does not fix it).
"""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

import pytest

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import Node
from harness.podrun.kueue.config import KueueConfiguration
from harness.podrun.kueue.emulator import KueueEmulator
from harness.podrun.kueue.podsready import UNSCHEDULED_GATE, WaitForPodsReady
from harness.podrun.manifests import NS, service_accounts, spec, workload
from trainer.contract import JobSpec

from .test_kueue_routing import FLAVOR, RESERVATION, shipped_kueue_objects

pytestmark = pytest.mark.timeout(120)
JOB = "rl-stranded00001"
# The reservation pool was made without --node-labels=cloud.google.com/reservation-name=...: nothing takes the pod.
NODES = [Node.gke_tpu("tpu-reservation-0", "reservation"), Node.gke_tpu("tpu-spot-0", "spot")]
FAST = WaitForPodsReady(timeout_s=600, unscheduled_timeout_s=2, backoff_base_s=1, backoff_max_s=2)


def _config(gate: bool) -> KueueConfiguration:
    return KueueConfiguration(wait_for_pods_ready=FAST, feature_gates=((UNSCHEDULED_GATE, gate),))


def _job_spec() -> JobSpec:
    base = spec("v6e-8", 8)
    hardware = {**base.hardware.model_dump(), "capacity": ["reservation", "spot"], "reservation": RESERVATION}
    return JobSpec.model_validate({**base.model_dump(), "hardware": hardware})


def _flavors(wl: dict[str, Any]) -> set[str]:
    admission = (wl.get("status") or {}).get("admission") or {}
    return {f for ps in admission.get("podSetAssignments") or [] for f in (ps.get("flavors") or {}).values()}


def _cond(wl: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((c for c in ((wl or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


async def _start(cluster: EmulatedCluster) -> None:
    for obj in [*service_accounts(), *shipped_kueue_objects()]:
        await cluster.create(obj)
    command = ["python", "-c", textwrap.dedent("import time; time.sleep(600)")]
    for obj in workload(JOB, command, job_spec=_job_spec(), kueue_queue="rljob-v6e"):
        await cluster.create(obj)


async def test_v020_evicts_the_unschedulable_job_and_readmits_it_into_the_first_flavor_again(kmock, tmp_path):
    kueue = KueueEmulator(version="v0.20.0", config=_config(gate=True))
    async with EmulatedCluster(kmock, tmp_path, nodes=NODES, kueue=kueue) as cluster:
        await _start(cluster)

        def wl() -> dict[str, Any] | None:
            job = cluster.get("Job", NS, JOB)
            return kueue.workload_for(job) if job else None

        await cluster.wait_for(lambda: _flavors(wl() or {}), "first admission")
        assert _flavors(wl() or {}) == {FLAVOR["reservation"]}, "the ClusterQueue's first flavor the job may use"

        def unschedulable() -> bool:
            pods = cluster.pods(NS, **{"job-name": JOB})
            return bool(pods) and any(c.get("reason") == "Unschedulable" for c in pods[0]["status"].get("conditions") or [])

        await cluster.wait_for(unschedulable, "the pod Unschedulable on the reservation flavor's selector")

        def evictions(n: int) -> dict[str, Any] | None:
            w = wl() or {}
            state = (w.get("status") or {}).get("requeueState") or {}
            return w if state.get("count") == n and _cond(w, "Evicted").get("status") == "True" else None

        first = await cluster.wait_for(lambda: evictions(1), "evicted after unscheduledTimeout", timeout_s=30)
        evicted = _cond(first, "Evicted")
        assert (evicted["reason"], evicted["message"]) == (
            "PodsReadyTimeout",
            f"Exceeded the PodsReady timeout {NS}/{first['metadata']['name']}",
        )
        assert first["status"]["schedulingStats"]["evictions"][0]["underlyingCause"] == "WaitForScheduling"
        assert _cond(first, "QuotaReserved")["status"] == "False" and not first["status"].get("admission")
        job = await cluster.wait_for(
            lambda: (j := cluster.get("Job", NS, JOB)) and j["spec"]["suspend"] is True and j, "stopped: suspended again", timeout_s=10
        )
        assert "cloud.google.com/reservation-name" not in (job["spec"]["template"]["spec"].get("nodeSelector") or {})

        # Requeued after backoff (1 s), admitted again: from the first flavor, the reservation again, not spot.
        await cluster.wait_for(lambda: _cond(wl(), "Admitted").get("status") == "True", "readmitted after backoff", timeout_s=30)
        again = wl() or {}
        assert _flavors(again) == {FLAVOR["reservation"]}, "upstream restarts the flavor scan: the same stuck flavor"
        assert _cond(again, "Evicted")["status"] == "False" and _cond(again, "Evicted")["message"] == "Previously: PodsReadyTimeout"
        second = await cluster.wait_for(lambda: evictions(2), "evicted again: the loop", timeout_s=30)
        assert second["status"]["requeueState"]["count"] == 2
        assert not any(p["spec"].get("nodeName") == "tpu-spot-0" for p in cluster.pods(NS, **{"job-name": JOB}))


@pytest.mark.parametrize(("version", "gate"), [("v0.19.2", True), ("v0.20.0", False)])
async def test_without_v020s_gate_the_job_waits_for_the_30m_style_timeout_instead(kmock, tmp_path, version, gate):
    """The unscheduledTimeout is v0.20's, behind WaitForPodsReadyUnscheduledTimeout: otherwise only `timeout` (here
    600 s) applies, so the job is still admitted, not evicted, well past the 2 s unscheduledTimeout."""
    kueue = KueueEmulator(version=version, config=_config(gate=gate))
    async with EmulatedCluster(kmock, tmp_path, nodes=NODES, kueue=kueue) as cluster:
        await _start(cluster)
        job = await cluster.wait_for(lambda: cluster.get("Job", NS, JOB), "job")
        await cluster.wait_for(lambda: _cond(kueue.workload_for(job), "Admitted").get("status") == "True", "admitted")
        admitted_at = _cond(kueue.workload_for(job), "Admitted")["lastTransitionTime"]
        await asyncio.sleep(5)
        w = kueue.workload_for(job)
        assert _cond(w, "Admitted")["status"] == "True" and _cond(w, "Admitted")["lastTransitionTime"] == admitted_at
        assert _cond(w, "Evicted") == {} and not (w or {}).get("status", {}).get("requeueState")
