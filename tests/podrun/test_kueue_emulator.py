"""The Kueue emulator and the several-node scheduler, held to upstream's own cases: Kueue v0.19.2's
flavorassigner_test.go / scheduler_test.go / workload_names_test.go and the v0.17.5 code for the older
key rule; kube-scheduler's FitError message. The Kueue objects are built here (not read from k8s/kueue/),
so these tests say what Kueue does, whatever our deployment holds."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import CAPACITY_LABEL, Node, pick_node
from harness.podrun.kueue.controller import assign_flavors, check_condition, cluster_queue_active, queue_order
from harness.podrun.kueue.emulator import InvalidKueueObject, KueueEmulator
from harness.podrun.kueue.reconcile import KueueState, decide_kueue
from harness.podrun.kueue.workload import build_workload, pod_sets, schema_errors, workload_name

from .conftest import TRAINER_IMAGE

pytestmark = pytest.mark.timeout(60)
NS = "rljob"
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
KV = "kueue.x-k8s.io/v1beta2"
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}


def flavor(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": KV,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {**({"nodeLabels": labels} if labels else {}), **spec},
    }


def cluster_queue(name: str, *flavors: tuple[str, dict[str, str]], checks: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    resources = sorted({r for _, quota in flavors for r in quota})
    out: dict[str, Any] = {
        "apiVersion": KV,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": resources,
                    "flavors": [
                        {"name": f, "resources": [{"name": r, "nominalQuota": quota.get(r, "0")} for r in resources]}
                        for f, quota in flavors
                    ],
                }
            ],
            **spec,
        },
    }
    if checks:
        out["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return out


def local_queue(name: str, cq: str) -> dict[str, Any]:
    return {"apiVersion": KV, "kind": "LocalQueue", "metadata": {"name": name, "namespace": NS}, "spec": {"clusterQueue": cq}}


def job(
    name: str,
    *,
    requests: dict[str, str],
    selector: dict[str, str] | None = None,
    queue: str = "team",
    tolerations: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    command: list[str] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "c",
                "image": TRAINER_IMAGE,
                "command": command or ["python", "-c", "print('ok')"],
                "resources": {"requests": requests, "limits": requests},
            }
        ],
    }
    if selector:
        pod_spec["nodeSelector"] = selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": queue, **(labels or {})}}
    if uid:
        meta.update(uid=uid, creationTimestamp="2026-12-01T00:00:00Z")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": pod_spec}},
    }


def workload_of(owner: dict[str, Any], priority_classes: dict[str, Any] | None = None) -> dict[str, Any]:
    wl = build_workload(owner, priority_classes or {})
    wl["metadata"]["creationTimestamp"] = owner["metadata"]["creationTimestamp"]
    return wl


# -- naming and schema -------------------------------------------------------------------------------------


def test_workload_names_match_upstreams_vectors():
    """workload_names_test.go: "short name, no extra" and "long owner name truncated" (ShortWorkloadNames=false)."""
    assert workload_name("Job", "name", "uid") == "job-name-ef3a1"
    long = (
        "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-social-media-"
        "engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-senior-architect-"
        "validation-checked-approved-by-legal-and-ops-dept"
    )
    assert workload_name("Job", long, "uid") == ("job-" + long)[:247] + "-218b8"


def test_a_workload_carries_upstreams_fields_and_passes_the_crd_schema():
    owner = job("train", requests={"cpu": "2"}, uid="u-1", labels={"kueue.x-k8s.io/priority-class": "high"})
    wl = workload_of(owner, {"high": {"value": 1000}})
    assert wl["metadata"]["labels"] == {"kueue.x-k8s.io/job-uid": "u-1"}
    assert wl["metadata"]["ownerReferences"][0] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert wl["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    assert (wl["spec"]["priority"], wl["spec"]["queueName"], wl["spec"]["podSets"][0]["name"]) == (1000, "team", "main")
    assert schema_errors(wl) == []
    assert schema_errors({**wl, "spec": {**wl["spec"], "queue": "x"}}), "a misspelt field must fail the schema"


# -- flavor assignment (flavorassigner_test.go) ------------------------------------------------------------

FLAVORS = {
    "default": flavor("default"),
    "one": flavor("one", {"type": "one"}),
    "two": flavor("two", {"type": "two"}),
    "tainted": flavor("tainted", {"type": "tainted"}, nodeTaints=[{"key": "key", "value": "val", "effect": "NoSchedule"}]),
}


def _assign(cq: dict[str, Any], pod: dict[str, Any], rule: str, used: dict[tuple[str, str], Decimal] | None = None):
    return assign_flavors(workload_of(pod), cq, FLAVORS, used or {}, rule)


def test_labelless_flavor_first_takes_a_pod_that_selects_another_flavors_label_under_flavor_keys():
    """flavorassigner_test.go "labelless flavor in group with labeled flavor, workload uses labeled selector"."""
    cq = cluster_queue("cq", ("default", {"cpu": "4"}), ("two", {"cpu": "4"}))
    pod = job("j", requests={"cpu": "1"}, selector={"type": "two"}, uid="u")
    a = _assign(cq, pod, "flavor-keys")
    assert a.message == "" and a.pod_sets[0]["flavors"] == {"cpu": "default"}
    # <= v0.17.5: the group's label keys are the union, so "default" (no "type") fails and "two" takes it.
    b = _assign(cq, pod, "union-keys")
    assert b.message == "" and b.pod_sets[0]["flavors"] == {"cpu": "two"}


def test_a_pod_no_flavor_matches_gets_every_flavors_reason():
    cq = cluster_queue("cq", ("one", {"cpu": "4"}), ("two", {"cpu": "4"}))
    a = _assign(cq, job("j", requests={"cpu": "1"}, selector={"type": "three"}, uid="u"), "flavor-keys")
    assert a.message == (
        "couldn't assign flavors to pod set main: flavor one doesn't match node affinity, flavor two doesn't match node affinity"
    )


def test_quota_exhaustion_moves_to_the_next_flavor_then_pends_with_upstreams_message():
    cq = cluster_queue("cq", ("default", {"cpu": "4"}), ("two", {"cpu": "4"}))
    pod = job("j", requests={"cpu": "1"}, uid="u")
    a = _assign(cq, pod, "flavor-keys", {("default", "cpu"): Decimal(4)})
    assert a.pod_sets[0]["flavors"] == {"cpu": "two"} and a.pod_sets[0]["resourceUsage"] == {"cpu": "1"}
    full = {("default", "cpu"): Decimal(4), ("two", "cpu"): Decimal(4)}
    assert _assign(cq, pod, "flavor-keys", full).message == (  # scheduler_test.go's two-flavor message shape
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed, "
        "insufficient unused quota for cpu in flavor two, 1 more needed"
    )
    big = job("j", requests={"cpu": "9"}, uid="u")
    assert _assign(cluster_queue("cq", ("one", {"cpu": "4"})), big, "flavor-keys").message == (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor one, previously considered "
        "podsets requests (0) + current podset request (9) > maximum capacity (4)"
    )


def test_an_untolerated_flavor_taint_and_an_uncovered_resource():
    cq = cluster_queue("cq", ("tainted", {"cpu": "4"}))
    assert _assign(cq, job("j", requests={"cpu": "1"}, uid="u"), "flavor-keys").message == (
        "couldn't assign flavors to pod set main: untolerated taint {key val NoSchedule <nil>} in flavor tainted"
    )
    tolerant = job("j", requests={"cpu": "1"}, uid="u", tolerations=[{"key": "key", "operator": "Exists"}])
    assert _assign(cq, tolerant, "flavor-keys").pod_sets[0]["flavors"] == {"cpu": "tainted"}
    tpu = job("j", requests={"cpu": "1", "google.com/tpu": "8"}, uid="u", tolerations=[{"key": "key", "operator": "Exists"}])
    assert _assign(cq, tpu, "flavor-keys").message == (
        "couldn't assign flavors to pod set main: resource google.com/tpu unavailable in ClusterQueue"
    )


# -- queues and admission checks ---------------------------------------------------------------------------


def test_an_inactive_admission_check_makes_the_cluster_queue_inactive():
    check = {
        "apiVersion": KV,
        "kind": "AdmissionCheck",
        "metadata": {"name": "dws"},
        "spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request",
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "dws"},
        },
    }
    assert check_condition(check, serves_provisioning=False, prov_configs={"dws"}, now=NOW) is None  # no controller
    cq = cluster_queue("cq", ("default", {"cpu": "4"}), checks=["dws"])
    assert cluster_queue_active(cq, FLAVORS, {"dws": check}) == (
        False,
        "AdmissionCheckInactive",
        "Can't admit new workloads: references inactive AdmissionCheck(s): dws.",
    )
    active = {**check, "status": {"conditions": [check_condition(check, serves_provisioning=True, prov_configs={"dws"}, now=NOW)]}}
    assert cluster_queue_active(cq, FLAVORS, {"dws": active}) == (True, "Ready", "Can admit new workloads")
    missing = cluster_queue("cq", ("nope", {"cpu": "4"}))
    assert cluster_queue_active(missing, FLAVORS, {})[1:] == (
        "FlavorNotFound",
        "Can't admit new workloads: references missing ResourceFlavor(s): nope.",
    )


def _state(cq: dict[str, Any], *owners: dict[str, Any], workloads: list[dict[str, Any]] | None = None) -> KueueState:
    return KueueState(
        flavors=FLAVORS,
        cluster_queues={"cq": cq},
        checks={},
        priority_classes={"high": {"value": 100}},
        prov_configs=set(),
        local_queues=[local_queue("team", "cq")],
        workloads=workloads or [],
        owners=list(owners),
    )


def test_higher_priority_is_admitted_first_and_every_write_passes_the_schema():
    cq = cluster_queue("cq", ("default", {"cpu": "1"}))
    low = job("low", requests={"cpu": "1"}, uid="u-low")
    high = job("high", requests={"cpu": "1"}, uid="u-high", labels={"kueue.x-k8s.io/priority-class": "high"})
    high["metadata"]["creationTimestamp"] = "2026-12-01T00:05:00Z"  # younger, but higher priority
    created = decide_kueue(_state(cq, low, high), rule="flavor-keys", serves_provisioning=False, now=NOW).create
    assert {w["spec"]["priority"] for w in created} == {0, 100}
    wls = [
        {**w, "metadata": {**w["metadata"], "creationTimestamp": o["metadata"]["creationTimestamp"]}}
        for w, o in zip(created, (low, high), strict=True)
    ]
    d = decide_kueue(_state(cq, low, high, workloads=wls), rule="flavor-keys", serves_provisioning=False, now=NOW)
    by_name = {name: status for kind, _, name, status in d.status if kind == "Workload"}
    admitted, pending = by_name[workload_name("Job", "high", "u-high")], by_name[workload_name("Job", "low", "u-low")]
    assert admitted["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "default"}
    assert [(c["type"], c["reason"]) for c in admitted["conditions"]] == [("QuotaReserved", "QuotaReserved"), ("Admitted", "Admitted")]
    assert pending["conditions"][0] | {"lastTransitionTime": ""} == {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Pending",
        "lastTransitionTime": "",
        "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed",
    }
    for w in wls:
        status = by_name[w["metadata"]["name"]]
        assert schema_errors({**w, "status": {k: v for k, v in status.items() if v is not None}}) == []


# -- several nodes (kube-scheduler's FitError) -------------------------------------------------------------


def test_the_unschedulable_message_counts_reasons_per_node():
    nodes = [Node.gke_cpu("cpu-0"), Node.gke_tpu("tpu-od-0", "on-demand"), Node.gke_tpu("tpu-spot-0", "spot")]
    spot_pod = {
        "containers": [{"name": "c", "resources": {"requests": {"google.com/tpu": "8"}}}],
        "nodeSelector": {CAPACITY_LABEL: "spot"},
        "tolerations": [TPU_TOLERATION],
    }
    node, why = pick_node(spot_pod, nodes, {})
    assert node is None and why == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {cloud.google.com/gke-spot: true}, 2 node(s) didn't "
        "match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    spot_pod["tolerations"].append({"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    assert pick_node(spot_pod, nodes, {})[0] == nodes[2]
    node, why = pick_node(spot_pod, nodes, {"tpu-spot-0": [spot_pod]})
    assert why == (
        "0/3 nodes are available: 1 Insufficient google.com/tpu, 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )


# -- on the emulated cluster -------------------------------------------------------------------------------

TPU_REQUESTS = {"google.com/tpu": "8", "cpu": "1", "memory": "1Gi"}
TPU_FLAVOR_LABELS = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "2x4"}
SPOT_TOLERATION = {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


def _tpu_queue(*, checks: list[str] | None = None) -> list[dict[str, Any]]:
    return [
        flavor("v6e-on-demand", {**TPU_FLAVOR_LABELS, CAPACITY_LABEL: "on-demand"}),
        flavor(
            "v6e-spot",
            {**TPU_FLAVOR_LABELS, CAPACITY_LABEL: "spot", "cloud.google.com/gke-spot": "true"},
            nodeTaints=[SPOT_TAINT],
            tolerations=[SPOT_TOLERATION],
        ),
        cluster_queue(
            "tpu",
            ("v6e-on-demand", {"google.com/tpu": "8", "cpu": "100", "memory": "1000Gi"}),
            ("v6e-spot", {"google.com/tpu": "8", "cpu": "100", "memory": "1000Gi"}),
            checks=checks,
        ),
        local_queue("team", "tpu"),
    ]


NODES = [Node.gke_cpu("cpu-0"), Node.gke_tpu("tpu-od-0", "on-demand"), Node.gke_tpu("tpu-spot-0", "spot")]


async def test_a_queued_job_is_admitted_to_its_flavor_and_lands_on_that_capacitys_node(kmock, tmp_path):
    kueue = KueueEmulator(rule="flavor-keys")
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        for obj in _tpu_queue():
            await cluster.create(obj)
        await cluster.create(job("train", requests=TPU_REQUESTS, selector={CAPACITY_LABEL: "spot"}, tolerations=[TPU_TOLERATION]))
        done = await cluster.wait_for(
            lambda: next((p for p in cluster.pods(NS, **{"job-name": "train"}) if p["status"].get("phase") == "Succeeded"), None),
            "the pod ran",
        )
        assert cluster.node_of(NS, done["metadata"]["name"]) == NODES[2]
        # Kueue merged the flavor into the pod template: its nodeLabels, its toleration, the podset label.
        assert done["spec"]["nodeSelector"] == {CAPACITY_LABEL: "spot", **TPU_FLAVOR_LABELS, "cloud.google.com/gke-spot": "true"}
        assert SPOT_TOLERATION in done["spec"]["tolerations"] and done["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
        owner = cluster.get("Job", NS, "train")
        assert owner is not None and owner["spec"]["suspend"] is False
        wl = await cluster.wait_for(
            lambda: (
                kueue.condition("Workload", NS, kueue.workload_for(owner)["metadata"]["name"], "Finished") and kueue.workload_for(owner)
            ),
            "the Workload finished",
        )
        assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"]["google.com/tpu"] == "v6e-spot"
        assert schema_errors(wl) == []
        # Finished released the quota: the next spot job is admitted to the same flavor.
        await cluster.create(job("again", requests=TPU_REQUESTS, selector={CAPACITY_LABEL: "spot"}, tolerations=[TPU_TOLERATION]))
        await cluster.wait_for(lambda: (cluster.get("Job", NS, "again") or {}).get("spec", {}).get("suspend") is False, "readmitted")


async def test_an_inactive_admission_check_keeps_everything_suspended(kmock, tmp_path):
    kueue = KueueEmulator(serves_provisioning_request=False)
    check = {
        "apiVersion": KV,
        "kind": "AdmissionCheck",
        "metadata": {"name": "dws"},
        "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"},
    }
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        for obj in [check, *_tpu_queue(checks=["dws"])]:
            await cluster.create(obj)
        await cluster.create(job("train", requests=TPU_REQUESTS, selector={CAPACITY_LABEL: "on-demand"}, tolerations=[TPU_TOLERATION]))
        owner = await cluster.wait_for(lambda: cluster.get("Job", NS, "train"), "the Job")
        pending = await cluster.wait_for(
            lambda: (
                kueue.workload_for(owner)
                and kueue.condition("Workload", NS, kueue.workload_for(owner)["metadata"]["name"], "QuotaReserved")
            ),
            "the Workload's condition",
        )
        assert (pending["status"], pending["reason"], pending["message"]) == ("False", "Inadmissible", "ClusterQueue tpu is inactive")
        cq = kueue.condition("ClusterQueue", None, "tpu", "Active")
        assert cq is not None and (cq["status"], cq["reason"]) == ("False", "AdmissionCheckInactive")
        lq = kueue.condition("LocalQueue", NS, "team", "Active")
        assert lq is not None and (lq["status"], lq["reason"]) == ("False", "ClusterQueueIsInactive")
        assert cluster.get("Job", NS, "train")["spec"]["suspend"] is True and cluster.pods(NS) == []
        with pytest.raises(InvalidKueueObject):
            await cluster.create(local_queue("typo", "tpu") | {"spec": {"clusterQueueName": "tpu"}})


async def test_a_jobset_is_admitted_per_replicated_job_and_its_children_get_the_flavor(kmock, tmp_path):
    kueue = KueueEmulator(rule="union-keys")
    inner = job("x", requests=TPU_REQUESTS, selector={CAPACITY_LABEL: "on-demand"}, tolerations=[TPU_TOLERATION])["spec"]
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "team"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [{"name": "slice", "replicas": 1, "template": {"spec": {k: v for k, v in inner.items() if k != "suspend"}}}],
        },
    }
    async with EmulatedCluster(kmock, tmp_path / "nodes", nodes=NODES, kueue=kueue) as cluster:
        for obj in _tpu_queue():
            await cluster.create(obj)
        await cluster.create(jobset)
        done = await cluster.wait_for(
            lambda: next((p for p in cluster.pods(NS) if p["status"].get("phase") == "Succeeded"), None), "the JobSet's pod ran"
        )
        assert cluster.node_of(NS, done["metadata"]["name"]) == NODES[1]
        assert done["spec"]["nodeSelector"][CAPACITY_LABEL] == "on-demand"
        owner = cluster.get("JobSet", NS, "train")
        wl = kueue.workload_for(owner)
        assert wl is not None and wl["metadata"]["name"].startswith("jobset-train-")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("slice", 1)]


# -- starting an admitted owner, pod sets, ordering (jobframework, podset.go, cluster_queue.go) -------------


def _admitted(owner: dict[str, Any], flavor_name: str, cq: str = "cq") -> dict[str, Any]:
    wl = workload_of(owner)
    wl["status"] = {
        "admission": {"clusterQueue": cq, "podSetAssignments": [{"name": "main", "flavors": {"cpu": flavor_name}, "count": 1}]},
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}
            for t in ("QuotaReserved", "Admitted")
        ],
    }
    return wl


def test_starting_merges_the_flavor_and_kueues_labels_and_annotation_into_the_template():
    """reconciler.go getPodSetsInfoFromStatus with v0.19.2's default gates: podset, local-queue-name and
    cluster-queue-name labels (AssignQueueLabelsForPods), the workload annotation (TopologyAwareScheduling)."""
    owner = job("j", requests={"cpu": "1"}, uid="u-1")
    wl = _admitted(owner, "one")
    d = decide_kueue(
        _state(cluster_queue("cq", ("one", {"cpu": "4"})), owner, workloads=[wl]), rule="flavor-keys", serves_provisioning=False, now=NOW
    )
    [(_, spec)] = d.start
    template = spec["template"]
    assert spec["suspend"] is False and template["spec"]["nodeSelector"] == {"type": "one"}
    assert template["metadata"]["labels"] == {
        "kueue.x-k8s.io/podset": "main",
        "kueue.x-k8s.io/local-queue-name": "team",
        "kueue.x-k8s.io/cluster-queue-name": "cq",
    }
    assert template["metadata"]["annotations"] == {"kueue.x-k8s.io/workload": wl["metadata"]["name"]}


def test_a_node_selector_conflict_at_start_finishes_the_workload_as_failed_to_start():
    """reconciler.go step 7: startJob's error is permanent (podset.IsPermanent) -> workloadfinish.Finish with
    FailedToStartFinishedReason and the error; the owner stays suspended and the quota is released."""
    owner = job("j", requests={"cpu": "1"}, uid="u-1", selector={"type": "one"})
    wl = _admitted(owner, "two")
    d = decide_kueue(
        _state(cluster_queue("cq", ("two", {"cpu": "4"})), owner, workloads=[wl]), rule="flavor-keys", serves_provisioning=False, now=NOW
    )
    assert d.start == []
    [(_, _, _, status)] = [s for s in d.status if s[0] == "Workload"]
    finished = next(c for c in status["conditions"] if c["type"] == "Finished")
    assert (finished["status"], finished["reason"], finished["message"]) == (
        "True",
        "FailedToStart",
        "invalid admission check PodSetUpdate: conflict for nodeSelector: conflict for key=type, value1=one, value2=two",
    )


def test_an_admission_check_without_parameters_is_inactive():
    """admissioncheck_reconciler.go: ConfigFromRef's error -> Active False, BadParametersRef (refValidForGK)."""
    check = {
        "apiVersion": KV,
        "kind": "AdmissionCheck",
        "metadata": {"name": "dws"},
        "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"},
    }
    c = check_condition(check, serves_provisioning=True, prov_configs={"dws"}, now=NOW)
    assert c is not None and (c["status"], c["reason"], c["message"]) == ("False", "BadParametersRef", "missing parameters reference")
    wrong = {**check, "spec": {**check["spec"], "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ConfigMap", "name": "dws"}}}
    c = check_condition(wrong, serves_provisioning=True, prov_configs={"dws"}, now=NOW)
    assert c is not None and c["message"] == 'wrong kind "ConfigMap", expecting "ProvisioningRequestConfig": bad parameters reference'


def test_the_pod_set_drops_the_job_controllers_labels_but_batch_job_name():
    """jobs/job/job_controller.go cleanLabels: managedLabels minus batch.kubernetes.io/job-name."""
    owner = job("j", requests={"cpu": "1"}, uid="u-1")
    owner["spec"]["template"]["metadata"] = {
        "labels": {
            "job-name": "j",
            "controller-uid": "u-1",
            "batch.kubernetes.io/controller-uid": "u-1",
            "batch.kubernetes.io/job-name": "j",
            "app": "x",
        }
    }
    labels = pod_sets(owner)[0]["template"]["metadata"]["labels"]
    assert labels == {"batch.kubernetes.io/job-name": "j", "app": "x"}


def test_equal_priority_and_age_break_ties_by_uid():
    """cluster_queue.go baseCompareFunc: priority, then queue-order timestamp, then cmp.Compare(UID)."""
    a = workload_of(job("a", requests={"cpu": "1"}, uid="u-2"))
    b = workload_of(job("b", requests={"cpu": "1"}, uid="u-1"))
    for w, uid in ((a, "u-2"), (b, "u-1")):
        w["metadata"]["uid"] = uid
    assert [w["metadata"]["uid"] for w in queue_order([a, b])] == ["u-1", "u-2"]
