"""JobSet v0.12.0's pod webhook (harness/podrun/controllers/jobset_pod_webhook.py) and what it means for a multi-host slice.

A slice's pods all lose their node at once (a TPU host's maintenance: the kubelet ends them, DisruptionTarget,
Failed, not deleted). With the old rendering (podFailurePolicy Ignore on DisruptionTarget in the child Job) the
Job retries each pod in place, the failed leader stays beside the new one, the webhook refuses every new
follower and the slice hangs until its deadline (the control). With today's rendering the child Job fails, the
JobSet restarts whole and the trainer runs again.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.jobset_pod_webhook import admit_pod
from harness.podrun.controllers.scheduling import Node
from harness.podrun.manifests import NS, service_accounts, shared_dir, spec, workload

pytestmark = pytest.mark.timeout(150)
JOB = "rl-0123456789ab"
POOL = "tpu-slice-a"
TWO_LEADERS = f"expected 1 leader pod ({JOB}-slice-0-0), but got 2"


# -- the webhook's decision, pure --------------------------------------------------------------------------


def _pod(
    index: int, suffix: str, *, owner: str = "job-uid", node: str | None = None, phase: str = "Running", pinned: bool = False
) -> dict[str, Any]:
    labels = {"jobset.sigs.k8s.io/jobset-name": JOB, "jobset.sigs.k8s.io/replicatedjob-name": "slice", "jobset.sigs.k8s.io/job-index": "0"}
    annotations = {
        **labels,
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    return {
        "metadata": {
            "name": f"{JOB}-slice-0-{index}-{suffix}",
            "namespace": NS,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"uid": owner, "controller": True}],
        },
        "spec": {
            "nodeSelector": {"rljob.dev/capacity": "on-demand", **({"cloud.google.com/gke-nodepool": POOL} if pinned else {})},
            **({"nodeName": node} if node else {}),
        },
        "status": {"phase": phase},
    }


NODES = {"tpu-a-0": {"cloud.google.com/gke-nodepool": POOL}}


def test_a_follower_takes_its_leaders_node_pool():
    admitted = admit_pod(_pod(1, "bbbbb"), [_pod(0, "aaaaa", node="tpu-a-0")], NODES)
    assert admitted.refused is None and admitted.pod is not None
    assert admitted.pod["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == POOL
    assert admit_pod(_pod(0, "ccccc"), [], NODES).pod is not None  # a leader is never held back


def test_a_follower_waits_for_its_leader_to_be_scheduled():
    refused = admit_pod(_pod(1, "bbbbb"), [_pod(0, "aaaaa")], NODES).refused
    assert refused is not None and refused.startswith('admission webhook "vpod.kb.io" denied the request')
    assert "missing selector: cloud.google.com/gke-nodepool" in refused


def test_a_failed_leader_beside_its_retry_refuses_every_follower_until_the_fix():
    pods = [_pod(0, "aaaaa", node="tpu-a-0", phase="Failed"), _pod(0, "ddddd", node="tpu-a-0")]
    refused = admit_pod(_pod(1, "bbbbb", pinned=True), pods, NODES).refused  # RLJOB_K8S_NODE_POOL set
    assert refused is not None and TWO_LEADERS in refused
    # Unpinned, the mutating half found no single leader so set no selector, and the validating half says so.
    refused = admit_pod(_pod(1, "bbbbb"), pods, NODES).refused
    assert refused is not None and "missing selector: cloud.google.com/gke-nodepool" in refused
    # jobset 1dc6eec9 leaves terminal pods out, and a leader being deleted was always left out.
    assert admit_pod(_pod(1, "bbbbb"), pods, NODES, leave_out_finished=True).refused is None
    deleting = [{**pods[0], "metadata": {**pods[0]["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}, pods[1]]
    assert admit_pod(_pod(1, "bbbbb"), deleting, NODES).refused is None


def test_a_follower_of_another_job_attempt_is_refused():
    refused = admit_pod(_pod(1, "bbbbb", owner="new-uid", pinned=True), [_pod(0, "aaaaa", node="tpu-a-0")], NODES).refused
    assert refused is not None and "follower pod owner UID (new-uid) != leader pod owner UID (job-uid)" in refused


# -- a whole slice on the emulated cluster ----------------------------------------------------------------

# Each worker records each run; a second run of a worker exits 0 (the resumed trainer finishing).
WORKER = """
    import os, signal, sys, time
    shared, index = sys.argv[1], os.environ['JOB_COMPLETION_INDEX']
    with open(os.path.join(shared, 'runs'), 'a') as f:
        f.write(index + '\\n')
    marker = os.path.join(shared, 'started-' + index)
    if os.path.exists(marker):
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    open(marker, 'w').write('1')
    time.sleep(120)
"""


def _slice_nodes() -> list[Node]:
    """The four VMs of one v6e-16 node pool, as GKE labels them."""
    return [Node.gke_tpu(f"tpu-a-{i}", pool=POOL, topology="4x4", machine_type="ct6e-standard-4t", chips=4) for i in range(4)]


def _runs(shared: Path) -> list[str]:
    path = shared / "runs"
    return sorted(path.read_text().split()) if path.exists() else []


def _jobset(cluster: EmulatedCluster) -> dict[str, Any]:
    return cluster.get("JobSet", NS, JOB) or {}


def _refusals(cluster: EmulatedCluster) -> list[str]:
    return [e["message"] for e in cluster.api.list("Event", NS) if e["reason"] == "FailedCreate"]


async def _run_slice(kmock: Any, tmp_path: Path, objects: list[dict[str, Any]], shared: Path) -> EmulatedCluster:
    cluster = EmulatedCluster(kmock, tmp_path / "nodes", nodes=_slice_nodes(), jobset_pod_webhook="v0.12.0")
    await cluster.__aenter__()
    for obj in [*service_accounts(), *objects]:
        await cluster.create(obj)
    await cluster.wait_for(lambda: len(list(shared.glob("started-*"))) == 4, "all four workers running", 60)
    for node in cluster.nodes:
        await cluster.shut_down_node(node.name, grace_s=2)
    return cluster


def _slice(shared: Path, **settings: Any) -> list[dict[str, Any]]:
    command = ["python", "-c", textwrap.dedent(WORKER), str(shared)]
    job_spec = spec("v6e-16", 4, output=str(shared / "out"))
    # Pinned to the pool, a refused follower says why (two leaders) rather than only that its selector is missing.
    return workload(JOB, command, job_spec=job_spec, host_paths=[str(shared)], backoff_limit=3, node_pool=POOL, **settings)


async def test_a_disrupted_slice_restarts_whole_and_the_trainer_runs_again(kmock, tmp_path):
    shared = shared_dir(tmp_path)
    cluster = await _run_slice(kmock, tmp_path, _slice(shared), shared)
    try:
        done = await cluster.wait_for(lambda: _jobset(cluster).get("status", {}).get("terminalState"), "the JobSet finished", 60)
        assert done == "Completed", _refusals(cluster)
        assert _jobset(cluster)["status"]["restarts"] == 1
        assert _runs(shared) == ["0", "0", "1", "1", "2", "2", "3", "3"]
        assert not [m for m in _refusals(cluster) if TWO_LEADERS in m]
    finally:
        await cluster.__aexit__(None, None, None)


async def test_control_an_in_place_retry_hangs_behind_the_webhook_until_the_deadline(kmock, tmp_path):
    shared = shared_dir(tmp_path)
    cm, jobset = _slice(shared, active_deadline_s=25)
    # The rendering before issue 35: the child Job retried a disrupted pod in place.
    rules = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    rules.insert(0, {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})
    cluster = await _run_slice(kmock, tmp_path, [cm, jobset], shared)
    try:
        await cluster.wait_for(lambda: any(TWO_LEADERS in m for m in _refusals(cluster)), "the webhook refusing the followers", 30)
        done = await cluster.wait_for(lambda: _jobset(cluster).get("status", {}).get("terminalState"), "the JobSet finished", 60)
        status = _jobset(cluster)["status"]
        assert done == "Failed" and status.get("restarts", 0) == 0
        assert "DeadlineExceeded" in next(c["message"] for c in status["conditions"] if c["type"] == "Failed")
        assert sorted(set(_runs(shared))) == ["0", "1", "2", "3"] and _runs(shared).count("1") == 1  # no follower ran again
    finally:
        await cluster.__aexit__(None, None, None)
