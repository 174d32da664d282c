"""A reservation job lands on a node that carries only what the guide's reservation pool command gives it.

The node is built from docs/deploy-gke.md itself: the `--node-labels` of its reservation pool command (the guide's
$RESERVATION expanded), plus only the labels GKE documents for a TPU node of that pool (hostname, node pool, instance
type, the TPU accelerator and topology; harness/podrun/controllers/scheduling.py Node.gke_tpu) and nothing for the reservation
(no source says GKE labels a hand-made pool's nodes with `cloud.google.com/reservation-name`). A reservation job
(hardware.reservation: the guide's $RESERVATION) goes through the shipped k8s/kueue/ objects under the Kueue
emulator: it is admitted into the reservation flavor and its pod bound to that node. The control builds the node
from the command without the reservation-name label: the job is still admitted (quota is not nodes), and its pod
stays Pending with FailedScheduling, as on a cluster whose pool lacks the label.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import AFFINITY_MISMATCH, Node
from harness.podrun.kueue.emulator import KueueEmulator
from harness.podrun.manifests import NS, service_accounts, spec, workload
from service.adapters.k8s.capacity import CAPACITY_LABEL, RESERVATION_NAME_LABEL
from tests.deploy import guide_pools
from trainer.contract import JobSpec

from .test_kueue_routing import FLAVOR, shipped_kueue_objects

pytestmark = pytest.mark.timeout(120)
JOB_ID = "rl-reservation01"
NODE = "tpu-res-0"


def node_from_guide(doc: str, *, drop: tuple[str, ...] = ()) -> Node:
    """The reservation pool's node as the guide's command makes it (`drop`: labels to leave out, for the control)."""
    cmd, flags = guide_pools.tpu_pools(doc)["reservation"]
    labels = {k: v for k, v in guide_pools.node_labels(doc, flags).items() if k not in drop}
    assert flags["--machine-type"] == "ct6e-standard-8t", "Node.gke_tpu's topology and chips are a v6e-8's"
    return Node.gke_tpu(
        NODE,
        labels[CAPACITY_LABEL],
        pool=guide_pools.pool_name(cmd),
        machine_type=flags["--machine-type"],
        labels=labels,
    )


def _reservation_spec(reservation: str) -> JobSpec:
    base = spec("v6e-8", 8)
    hardware = {**base.hardware.model_dump(), "capacity": "reservation", "reservation": reservation}
    return JobSpec.model_validate({**base.model_dump(), "hardware": hardware})


def _fake() -> list[str]:
    return ["python", "-c", textwrap.dedent(f"import time; print('{JOB_ID} running', flush=True); time.sleep(600)")]


async def _submit(kmock: Any, work: Any, node: Node, reservation: str) -> dict[str, Any]:
    """Run the reservation job on a cluster of one cpu node and `node`; return its admission and its pod's fate."""
    kueue = KueueEmulator()
    async with EmulatedCluster(kmock, work, nodes=[Node.gke_cpu("cpu-0"), node], kueue=kueue) as cluster:
        for obj in [*service_accounts(), *shipped_kueue_objects()]:
            await cluster.create(obj)
        for obj in workload(JOB_ID, _fake(), job_spec=_reservation_spec(reservation), kueue_queue="rljob-v6e"):
            await cluster.create(obj)

        def settled() -> dict[str, Any] | None:
            pods = cluster.pods(NS, **{"job-name": JOB_ID})
            if not pods:
                return None
            (pod,) = pods
            conds = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
            scheduled = conds.get("PodScheduled")
            if scheduled is None:
                return None
            events = [
                e["message"]
                for e in cluster.api.list("Event", NS)
                if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == pod["metadata"]["name"]
            ]
            if scheduled["status"] == "False" and not events:
                return None
            return {"pod": pod, "scheduled": scheduled, "failed_scheduling": events}

        seen = await cluster.wait_for(settled, "the reservation pod bound or refused by the scheduler", timeout_s=60)
        job = cluster.get("Job", NS, JOB_ID)
        assert job is not None
        admission = ((kueue.workload_for(job) or {}).get("status") or {}).get("admission") or {}
        seen["flavors"] = sorted({f for ps in admission.get("podSetAssignments") or [] for f in (ps.get("flavors") or {}).values()})
    return seen


async def test_a_reservation_job_lands_on_the_node_the_guides_pool_command_makes(kmock, tmp_path):
    doc = guide_pools.GUIDE.read_text()
    reservation = guide_pools.doc_var(doc, "RESERVATION")
    node = node_from_guide(doc)

    seen = await _submit(kmock, tmp_path / "nodes", node, reservation)
    assert seen["flavors"] == [FLAVOR["reservation"]], seen["flavors"]
    assert seen["scheduled"]["status"] == "True", (seen["scheduled"], seen["failed_scheduling"])
    assert seen["pod"]["spec"]["nodeName"] == NODE
    assert seen["failed_scheduling"] == []
    # The node held the guide's labels (the reservation's name among them), on the guide's pool.
    assert node.labels.get(RESERVATION_NAME_LABEL) == reservation
    assert node.labels[CAPACITY_LABEL] == "reservation"
    assert node.labels["cloud.google.com/gke-nodepool"] == "v6e-8-res"


async def test_control_without_the_reservation_label_the_pod_stays_pending(kmock, tmp_path):
    """The same command without `cloud.google.com/reservation-name` in --node-labels (the guide before issue 35):
    Kueue admits the job into the reservation flavor, then no node matches the pod's selector."""
    doc = guide_pools.GUIDE.read_text()
    reservation = guide_pools.doc_var(doc, "RESERVATION")
    node = node_from_guide(doc, drop=(RESERVATION_NAME_LABEL,))
    assert RESERVATION_NAME_LABEL not in node.labels

    seen = await _submit(kmock, tmp_path / "nodes", node, reservation)
    assert seen["flavors"] == [FLAVOR["reservation"]], seen["flavors"]
    assert not seen["pod"]["spec"].get("nodeName")
    assert (seen["scheduled"]["status"], seen["scheduled"]["reason"]) == ("False", "Unschedulable"), seen["scheduled"]
    assert seen["failed_scheduling"] and AFFINITY_MISMATCH in seen["failed_scheduling"][0], seen["failed_scheduling"]


def test_the_node_follows_the_guide_when_the_label_is_dropped_from_it():
    """Guards the test above against building its node from anything but the guide: the guide without the label
    gives a node without it."""
    doc = guide_pools.GUIDE.read_text()
    drifted = doc.replace(",cloud.google.com/reservation-name=$RESERVATION", "")
    assert drifted != doc
    assert RESERVATION_NAME_LABEL not in node_from_guide(drifted).labels
