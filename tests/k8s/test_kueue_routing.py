"""Where a job of each capacity really lands: the shipped k8s/kueue/ objects, the manifests the launcher
renders, and an emulated GKE cluster with one node per capacity, under the Kueue emulator's upstream rules
(harness/podrun/kueue/emulator.py, following kueue v0.19.2 and, where it differs, v0.20.0: harness/podrun/kueue/versions.py;
both flavor-matching rules: `flavor-keys` is v0.17.6+, v0.18.2+, v0.19.x and v0.20, `union-keys` is older).
The trainer container runs a fake command; everything else is the rendered manifest.

What this shows, for on-demand, spot, flex-start and reservation TPU jobs and a cpu job: the Workload was
admitted into its own capacity's flavor and no other, and its pod was bound to a node of its own capacity
(the nodes carry GKE's labels and taints); the cpu job never entered Kueue. The control runs the flavors
without the routing key on the on-demand flavor (as they were before): under the current rule a spot job
then goes into on-demand quota, the stranding issue 20 describes.
"""

from __future__ import annotations

import asyncio
import copy
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import Node
from harness.podrun.kueue.emulator import KueueEmulator
from harness.podrun.manifests import NS, service_accounts, settings, spec, workload
from harness.podrun.pods.images import ROOT
from service.adapters.k8s.capacity import CAPACITY_LABEL
from service.adapters.k8s.kueue_reasons import normalized_reason
from service.adapters.k8s.launcher import build_k8s_launcher
from service.domain.records.errors import InvalidRequest
from trainer.contract import JobSpec

from .conftest import configuration_for

pytestmark = pytest.mark.timeout(120)
RESERVATION = "rljob-v6e-8"  # the shipped reservation flavor's example name
CAPACITIES = ["on-demand", "spot", "flex-start", "reservation"]
NODES = [
    Node.gke_cpu("cpu-0"),
    *(Node.gke_tpu(f"tpu-{c}-0", c, reservation=RESERVATION if c == "reservation" else None) for c in CAPACITIES),
]
FLAVOR = {c: f"tpu-v6e-2x4-{c}" for c in CAPACITIES}
# The key rules with the reasons of the versions that have them: union-keys is older than the v0.20 reasons.
RULE_VERSIONS = [("flavor-keys", "v0.19.2"), ("union-keys", "v0.19.2"), ("flavor-keys", "v0.20.0")]


def shipped_kueue_objects() -> list[dict[str, Any]]:
    """k8s/kueue/ as applied (kustomization.yaml's resources), in dependency order."""
    kueue_dir = ROOT / "k8s" / "kueue"
    files = yaml.safe_load((kueue_dir / "kustomization.yaml").read_text())["resources"]
    docs = [d for f in files for d in yaml.safe_load_all((kueue_dir / f).read_text()) if d]
    order = ["ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue"]
    return sorted(docs, key=lambda d: order.index(d["kind"]))


def _tpu_spec(capacity: str) -> JobSpec:
    base = spec("v6e-8", 8)
    hardware = {**base.hardware.model_dump(), "capacity": capacity, "reservation": RESERVATION if capacity == "reservation" else None}
    return JobSpec.model_validate({**base.model_dump(), "hardware": hardware})


def _fake(job_id: str) -> list[str]:
    # Runs until the cluster stops: a finished job would release its quota (the overflow check needs it held).
    return ["python", "-c", textwrap.dedent(f"import time; print('{job_id} running', flush=True); time.sleep(600)")]


async def _run(
    kmock: Any,
    work: Path,
    rule: str,
    kueue_objects: list[dict[str, Any]],
    capacities: tuple[str, ...] = (*CAPACITIES, "cpu"),
    *,
    overflow: bool = False,
    version: str = "v0.19.2",
) -> dict[str, dict[str, Any]]:
    """Submit one job per capacity (and cpu); return, per job, its admitted flavors and node."""
    kueue = KueueEmulator(rule=rule, version=version)
    jobs = {c: f"rl-{c.replace('-', '')[:8]:0<8}0000" for c in capacities}
    seen: dict[str, dict[str, Any]] = {}
    async with EmulatedCluster(kmock, work, nodes=NODES, kueue=kueue) as cluster:
        for obj in [*service_accounts(), *kueue_objects]:
            await cluster.create(obj)
        for capacity, job_id in jobs.items():
            job_spec = spec() if capacity == "cpu" else _tpu_spec(capacity)
            for obj in workload(job_id, _fake(job_id), job_spec=job_spec, kueue_queue="rljob-v6e"):
                await cluster.create(obj)

        def all_bound() -> bool:
            return all(
                cluster.pods(NS, **{"job-name": j}) and cluster.pods(NS, **{"job-name": j})[0]["spec"].get("nodeName")
                for j in jobs.values()
            )

        def admitted_flavors(job: dict[str, Any]) -> list[str]:
            admission = (kueue.workload_for(job) or {}).get("status", {}).get("admission") or {}
            # One flavor per resource (cpu, memory, google.com/tpu) of each podset.
            return sorted({f for ps in admission.get("podSetAssignments") or [] for f in (ps.get("flavors") or {}).values()})

        try:
            await cluster.wait_for(all_bound, "every job's pod bound to a node", timeout_s=60)
        except AssertionError as e:  # admitted into a flavor whose nodes it does not select: say which
            admitted = {c: admitted_flavors(job) for c, j in jobs.items() if (job := cluster.get("Job", NS, j)) is not None}
            raise AssertionError(f"{e}; admitted into {admitted}") from e
        for capacity, job_id in jobs.items():
            job = cluster.get("Job", NS, job_id)
            assert job is not None
            workload_obj = kueue.workload_for(job)
            flavors = admitted_flavors(job)
            (pod,) = cluster.pods(NS, **{"job-name": job_id})
            seen[capacity] = {
                "queued": "kueue.x-k8s.io/queue-name" in job["metadata"]["labels"],
                "workload": workload_obj is not None,
                "flavors": flavors,
                "node": pod["spec"]["nodeName"],
                "selector": pod["spec"].get("nodeSelector") or {},
            }
        if overflow:
            # A second on-demand job while on-demand quota is full: it must wait, not spill into another flavor.
            job_id = "rl-ondemand0001"
            for obj in workload(job_id, _fake(job_id), job_spec=_tpu_spec("on-demand"), kueue_queue="rljob-v6e"):
                await cluster.create(obj)

            def reserved() -> dict[str, Any] | None:
                job = cluster.get("Job", NS, job_id)
                conds = ((kueue.workload_for(job) or {}) if job else {}).get("status", {}).get("conditions") or []
                return next((c for c in conds if c["type"] == "QuotaReserved"), None)

            seen["overflow"] = await cluster.wait_for(reserved, "the overflow job's QuotaReserved condition")
            assert not cluster.pods(NS, **{"job-name": job_id})
    return seen


@pytest.mark.parametrize(("rule", "version"), RULE_VERSIONS)
async def test_every_capacity_lands_in_its_own_flavor_and_on_its_own_nodes(kmock, tmp_path, rule, version):
    seen = await _run(kmock, tmp_path / "nodes", rule, shipped_kueue_objects(), overflow=True, version=version)
    for capacity in CAPACITIES:
        assert seen[capacity]["flavors"] == [FLAVOR[capacity]], (rule, capacity, seen[capacity])
        assert seen[capacity]["node"] == f"tpu-{capacity}-0", (rule, capacity, seen[capacity])
        assert seen[capacity]["selector"][CAPACITY_LABEL] == capacity
    # cpu: not queued, no Workload, no TPU labels merged in, on the plain node.
    assert seen["cpu"] == {"queued": False, "workload": False, "flavors": [], "node": "cpu-0", "selector": {}}
    # On-demand quota full: the next on-demand job waits (Kueue's own words), it is not admitted into the spot,
    # flex-start or reservation quota that is still free.
    # v0.19.2 says Pending (scheduler.go requeueAndUpdate); v0.20.0, UnadmittedWorkloadsObservability on by default,
    # the assignment's NoFitReason: WaitingForQuota, on-demand being the least severe flavor's reason (flavorassigner.go
    # resolveNoFitReason). The message is the same on both, and rljob reads both as WaitingForQuota.
    overflow = seen["overflow"]
    expected = {"v0.19.2": "Pending", "v0.20.0": "WaitingForQuota"}[version]
    assert (overflow["status"], overflow["reason"]) == ("False", expected), overflow
    assert FLAVOR["on-demand"] in overflow["message"] and "insufficient" in overflow["message"], overflow
    assert normalized_reason(overflow["reason"], overflow["message"]) == "WaitingForQuota", overflow


@pytest.mark.parametrize(("rule", "version"), RULE_VERSIONS)
@pytest.mark.parametrize("capacity", CAPACITIES)
async def test_each_capacity_submitted_alone_lands_in_its_own_flavor(kmock, tmp_path, rule, capacity, version):
    """Each job with every flavor's quota free: its own routing, not what the quota other jobs took left it. Submitted
    together, a job that routing let into another kind's flavor could find that flavor full, be tried against the
    next in the pool's order and land on its own kind anyway. Mutation-checked: a spot pod without its capacity
    selector is admitted into the first flavor it then matches (reservation; on-demand in the pool's order before
    issue 35) and never bound, under flavor-keys. Under union-keys GKE's spot label alone routes it to spot."""
    seen = await _run(kmock, tmp_path / "nodes", rule, shipped_kueue_objects(), (capacity,), version=version)
    assert seen[capacity]["flavors"] == [FLAVOR[capacity]], (rule, capacity, seen[capacity])
    assert seen[capacity]["node"] == f"tpu-{capacity}-0", (rule, capacity, seen[capacity])


async def test_control_a_flavor_without_the_routing_key_takes_a_flex_start_job_into_on_demand_quota(kmock, tmp_path):
    """The flavors as they were (on-demand named no capacity label): under Kueue's current rule a flavor without
    the key matches every pod, so a flex-start job, tried against the pool's flavors in order (reservation and
    spot refuse it on their keys), is admitted into on-demand quota. Routing by the shared key is what the test
    above depends on."""
    objs = copy.deepcopy(shipped_kueue_objects())
    for obj in objs:
        if obj["kind"] == "ResourceFlavor" and obj["metadata"]["name"] == FLAVOR["on-demand"]:
            del obj["spec"]["nodeLabels"][CAPACITY_LABEL]
    seen = await _run(kmock, tmp_path / "nodes", "flavor-keys", objs, ("flex-start",))
    assert seen["flex-start"]["flavors"] == [FLAVOR["on-demand"]]
    assert seen["flex-start"]["node"] == "tpu-flex-start-0", "on a flex-start node while holding on-demand quota"


async def test_a_job_no_shipped_flavor_can_take_is_refused_at_submit(kmock, tmp_path):
    """The submit check reads what the emulated Kueue keeps (LocalQueue -> ClusterQueue, its Active condition
    as the emulator sets it -> ResourceFlavors): a slice no flavor covers (v6e-16: topology 4x4; v5e-1: another
    accelerator, docs/deploy-gke.md says so) and a reservation no flavor names are refused with the flavors named;
    every shipped capacity of a v6e-8 passes."""
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=KueueEmulator()) as cluster:
        for obj in shipped_kueue_objects():
            await cluster.create(obj)
        launcher = build_k8s_launcher(settings(kueue_queue="rljob-v6e"), sleep=lambda s: None, configuration=configuration_for(kmock))

        async def refusal(job_spec: JobSpec) -> str | None:
            try:
                await asyncio.to_thread(launcher.check_submittable, job_spec)
            except InvalidRequest as exc:
                assert exc.loc == ("hardware",)
                return str(exc)
            return None

        for capacity in CAPACITIES:
            assert await refusal(_tpu_spec(capacity)) is None, capacity
        wide = await refusal(spec("v6e-16", 4))
        assert wide is not None and "no flavor of ClusterQueue rljob-v6e" in wide
        assert all(name in wide for name in FLAVOR.values()), wide
        v5e = await refusal(spec("v5e-1", 1))
        assert v5e is not None and "no flavor of ClusterQueue rljob-v6e" in v5e
        other = _tpu_spec("reservation").model_dump()
        other["hardware"]["reservation"] = "someone-elses"
        assert await refusal(JobSpec.model_validate(other)) is not None
        assert await refusal(spec()) is None, "cpu jobs are not Kueue's to refuse"
