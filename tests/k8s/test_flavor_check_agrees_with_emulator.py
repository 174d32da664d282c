"""The submit-time flavor check (service/adapters/k8s/kueue_setup.py) against the emulated Kueue's flavor assigner
(harness/podrun/kueue/controller.py, Kueue v0.19.2) on the same inputs: the service may not import the harness, so
the two are written apart and must agree. Matching: flavorSelector + RequiredNodeAffinity.Match, case by case.
Whole jobs: a rendered job is refused at submit exactly when the emulator, with nothing else admitted, assigns it
no flavor."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from harness.kueue_cluster import FLAVORS, TPU_LABELS
from harness.podrun.kueue import controller as emulated
from harness.podrun.kueue.workload import pod_sets, podset_requests
from service.adapters.k8s import kueue_setup
from service.adapters.k8s.manifests import build_workload
from service.adapters.k8s.serialize import to_plain

from .conftest import make_eval_spec, make_settings, make_spec

CAP = "rljob.dev/capacity"
SPOT = "cloud.google.com/gke-spot"
RES = "cloud.google.com/reservation-name"


def _term(*exprs: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": k, "operator": op, **({"values": v} if v else {})} for k, op, v in exprs]}


def _pod(node_selector: dict[str, str] | None = None, terms: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": "c"}]}
    if node_selector:
        pod["nodeSelector"] = node_selector
    if terms is not None:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    return pod


SPOT_LABELS = {CAP: "spot", SPOT: "true", "zone": "7"}
SPOT_OR_ON_DEMAND = [_term((CAP, "In", ["spot"]), (SPOT, "In", ["true"])), _term((CAP, "In", ["on-demand"]))]
# (pod, the flavor's nodeLabels, what Kueue v0.19.2 decides)
MATCH_CASES = [
    (_pod({CAP: "spot"}), SPOT_LABELS, True),
    (_pod({CAP: "on-demand"}), SPOT_LABELS, False),
    (_pod({"other": "x"}), SPOT_LABELS, True),  # a key the flavor does not name is not compared
    (_pod({CAP: "on-demand"}), {}, True),  # a labelless flavor matches every pod
    (_pod(None, SPOT_OR_ON_DEMAND), SPOT_LABELS, True),
    (_pod(None, SPOT_OR_ON_DEMAND), {CAP: "on-demand"}, True),
    (_pod(None, SPOT_OR_ON_DEMAND), {CAP: "flex-start"}, False),
    (_pod(None, SPOT_OR_ON_DEMAND), {CAP: "spot"}, True),  # the spot term cut to rljob.dev/capacity
    (_pod(None, SPOT_OR_ON_DEMAND), {CAP: "spot", SPOT: "false"}, False),
    (_pod(None, [_term((CAP, "In", ["reservation"]), (RES, "In", ["r1"]))]), {CAP: "reservation", RES: "r2"}, False),
    (_pod(None, [_term((CAP, "In", ["reservation"]), (RES, "In", ["r1"]))]), {CAP: "reservation", RES: "r1"}, True),
    (_pod(None, [_term((CAP, "In", ["flex-start"])), _term(("elsewhere", "In", ["x"]))]), {CAP: "spot"}, True),  # empty term
    (_pod(None, [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]), {CAP: "spot"}, True),
    (_pod(None, []), {CAP: "spot"}, True),
    (_pod({CAP: "spot"}, [_term((CAP, "In", ["on-demand"]))]), SPOT_LABELS, False),  # selector and affinity both hold
    (_pod({CAP: "on-demand"}, [_term((CAP, "In", ["spot"]))]), SPOT_LABELS, False),
    (_pod(None, [_term((CAP, "NotIn", ["spot"]))]), SPOT_LABELS, False),
    (_pod(None, [_term((CAP, "NotIn", ["spot"]))]), {CAP: "on-demand"}, True),
    (_pod(None, [_term((SPOT, "Exists", []))]), SPOT_LABELS, True),
    (_pod(None, [_term((SPOT, "DoesNotExist", []))]), SPOT_LABELS, False),
    (_pod(None, [_term(("zone", "Gt", ["5"]))]), SPOT_LABELS, True),
    (_pod(None, [_term(("zone", "Lt", ["5"]))]), SPOT_LABELS, False),
    (_pod(None, [_term(("zone", "Gt", ["x"]))]), SPOT_LABELS, False),
]


@pytest.mark.parametrize(("pod", "labels", "expected"), MATCH_CASES)
def test_flavor_matching_agrees_with_the_emulator(pod, labels, expected):
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = None if required is None else required["nodeSelectorTerms"]
    ours = kueue_setup.flavor_selector_matches(pod.get("nodeSelector") or {}, terms, labels)
    theirs = emulated.flavor_selector_matches(pod, set(labels), labels)
    assert (ours, theirs) == (expected, expected)


RESERVATION = "tpu-res-1"
RESOURCE_FLAVORS: dict[str, dict[str, Any]] = {
    name: {"metadata": {"name": name}, "spec": {"nodeLabels": labels, "tolerations": tolerations}}
    for name, (labels, tolerations, _) in FLAVORS.items()
}
RESOURCE_FLAVORS["tpu-v6e-2x4-reservation"] = {
    "metadata": {"name": "tpu-v6e-2x4-reservation"},
    "spec": {"nodeLabels": {**TPU_LABELS, CAP: "reservation", RES: RESERVATION}},
}
RESOURCE_FLAVORS["default"] = {"metadata": {"name": "default"}, "spec": {}}


def _cq(
    cpu: Any = 170, memory: Any = "1300Gi", tpu: Any = 8, *, flavors: tuple[str, ...] = ("tpu-v6e-2x4-on-demand", "tpu-v6e-2x4-spot")
) -> dict[str, Any]:
    res = [("cpu", cpu), ("memory", memory), ("google.com/tpu", tpu)]
    group = {
        "coveredResources": [r for r, _ in res],
        "flavors": [{"name": f, "resources": [{"name": r, "nominalQuota": q} for r, q in res]} for f in flavors],
    }
    return {"spec": {"resourceGroups": [group]}}


def _split_memory(memory: Any) -> dict[str, Any]:
    """cpu and TPU in the flavors' group; memory in a second group with a labelless flavor."""
    cq = _cq()
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"].remove("memory")
    for f in group["flavors"]:
        f["resources"] = [r for r in f["resources"] if r["name"] != "memory"]
    mem = {"name": "memory", "nominalQuota": memory}
    cq["spec"]["resourceGroups"].append({"coveredResources": ["memory"], "flavors": [{"name": "default", "resources": [mem]}]})
    return cq


def _uncovered(resource: str) -> dict[str, Any]:
    cq = _cq()
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"].remove(resource)
    for f in group["flavors"]:
        f["resources"] = [r for r in f["resources"] if r["name"] != resource]
    return cq


def _with_pods(quota: int) -> dict[str, Any]:
    cq = _cq()
    cq["spec"]["resourceGroups"].append(
        {"coveredResources": ["pods"], "flavors": [{"name": "default", "resources": [{"name": "pods", "nominalQuota": quota}]}]}
    )
    return cq


CLUSTER_QUEUES = {
    "healthy": _cq(),
    "with-reservation": _cq(flavors=("tpu-v6e-2x4-reservation", "tpu-v6e-2x4-spot")),
    "tpu-4": _cq(tpu=4),
    "cpu-100": _cq(cpu=100),
    "cpu-160": _cq(cpu="160"),
    "memory-1000Gi": _cq(memory="1000Gi"),
    "memory-group-enough": _split_memory("2Ti"),
    "memory-group-short": _split_memory("1Ti"),
    "memory-uncovered": _uncovered("memory"),
    "tpu-uncovered": _uncovered("google.com/tpu"),
    "pods-1": _with_pods(1),
    "pods-0": _with_pods(0),
}
CAPACITIES: list[Any] = [
    "on-demand",
    "spot",
    "flex-start",
    "reservation",
    ["spot", "on-demand"],
    ["flex-start", "spot"],
    ["flex-start", "reservation"],
    ["reservation", "spot", "on-demand"],
]


def _chain(cq: dict[str, Any]) -> kueue_setup.QueueChain:
    """What kueue_chain.read_chain builds from the same objects, without the reads."""
    groups = []
    for covered, flavors in kueue_setup.group_quotas(cq):
        found = [
            kueue_setup.make_flavor(name, quotas.get("google.com/tpu", Decimal(0)), RESOURCE_FLAVORS[name], quotas)
            for name, quotas in flavors
        ]
        groups.append(kueue_setup.ResourceGroup(covered, found))
    tpu = [g for g in groups if "google.com/tpu" in g.covered]
    return kueue_setup.QueueChain("team-ml", "rljob-v6e", [f for g in tpu for f in g.flavors], bool(tpu), [], groups)


def _job(capacity: Any, accelerator: str = "v6e-8", chips_per_vm: int = 8) -> tuple[kueue_setup.Demand, dict[str, Any]]:
    hardware = {
        "accelerator": accelerator,
        "chips_per_vm": chips_per_vm,
        "capacity": capacity,
        "rollout_data_parallelism": 1,
        "rollout_tensor_parallelism": -1,
    }
    if "reservation" in capacity:
        hardware["reservation"] = RESERVATION
    workload = build_workload(make_spec(hardware=hardware), "rl-000000000001", make_settings())
    owner = to_plain(workload.job) if workload.job is not None else copy.deepcopy(workload.jobset)
    owner["kind"] = "Job" if workload.job is not None else "JobSet"
    return kueue_setup.demand_of(workload), {"spec": {"podSets": pod_sets(owner)}}


@pytest.mark.parametrize("cq_name", sorted(CLUSTER_QUEUES))
@pytest.mark.parametrize("capacity", CAPACITIES, ids=str)
def test_the_submit_check_refuses_exactly_what_the_emulated_kueue_never_admits(cq_name, capacity):
    cq = CLUSTER_QUEUES[cq_name]
    demand, wl = _job(capacity)
    refused = kueue_setup.refusal(_chain(cq), demand)
    assigned = emulated.assign_flavors(wl, cq, RESOURCE_FLAVORS, {}, "flavor-keys")
    assert (refused is None) == bool(assigned.pod_sets), (refused, assigned.message)


RESOURCE_FLAVORS["tpu-v6e-4x4-on-demand"] = {
    "metadata": {"name": "tpu-v6e-4x4-on-demand"},
    "spec": {"nodeLabels": {**TPU_LABELS, "cloud.google.com/gke-tpu-topology": "4x4", CAP: "on-demand"}},
}


@pytest.mark.parametrize(
    ("quotas", "fits"),
    [
        ({"cpu": 640, "memory": "2560Gi", "tpu": 16}, True),  # 4 pods x (160 cpu, 640Gi, 4 chips)
        ({"cpu": 600, "memory": "2560Gi", "tpu": 16}, False),
        ({"cpu": 640, "memory": "2Ti", "tpu": 16}, False),
        ({"cpu": 640, "memory": "2560Gi", "tpu": 12}, False),
    ],
)
def test_a_multi_host_slice_is_counted_pods_times_the_pod_and_agrees(quotas, fits):
    cq = _cq(quotas["cpu"], quotas["memory"], quotas["tpu"], flavors=("tpu-v6e-2x4-on-demand", "tpu-v6e-4x4-on-demand"))
    demand, wl = _job("on-demand", "v6e-16", 4)
    assert demand.pods == 4
    refused = kueue_setup.refusal(_chain(cq), demand)
    assigned = emulated.assign_flavors(wl, cq, RESOURCE_FLAVORS, {}, "flavor-keys")
    assert (refused is None, bool(assigned.pod_sets)) == (fits, fits), (refused, assigned.message)


def test_the_pod_request_is_what_the_emulator_sums():
    demand, wl = _job(["spot", "on-demand"])
    (ps,) = wl["spec"]["podSets"]
    assert demand.requests(count_pods=False) == podset_requests(ps)
    assert set(demand.per_pod) == {"cpu", "memory", "google.com/tpu"}


RESOURCE_FLAVORS["cpu-eval"] = {
    "metadata": {"name": "cpu-eval"},
    "spec": {
        "nodeLabels": {CAP: "cpu-eval"},
        "tolerations": [{"key": CAP, "operator": "Equal", "value": "cpu-eval", "effect": "NoSchedule"}],
    },
}


def _with_eval(cpu: Any = 12, memory: Any = "48Gi") -> dict[str, Any]:
    """The shipped shape: the eval flavor last in the TPU group, cpu and memory quota, no TPUs."""
    cq = _cq(flavors=("tpu-v6e-2x4-reservation", "tpu-v6e-2x4-spot", "tpu-v6e-2x4-on-demand"))
    resources = [("cpu", cpu), ("memory", memory), ("google.com/tpu", 0)]
    cq["spec"]["resourceGroups"][0]["flavors"].append(
        {"name": "cpu-eval", "resources": [{"name": r, "nominalQuota": q} for r, q in resources]}
    )
    return cq


@pytest.mark.parametrize(
    ("cq", "admitted"),
    [
        (_with_eval(), True),
        (_with_eval(cpu=1), False),  # the eval pod asks 2 CPU (RLJOB_K8S_CPU_JOB_CPU)
        (_with_eval(memory="4Gi"), False),
        (_cq(flavors=("tpu-v6e-2x4-reservation", "tpu-v6e-2x4-spot", "tpu-v6e-2x4-on-demand")), False),  # no eval flavor
    ],
    ids=["eval-flavor", "eval-cpu-1", "eval-memory-4Gi", "no-eval-flavor"],
)
def test_an_eval_job_is_accepted_exactly_when_the_emulated_kueue_admits_it_into_the_eval_flavor(cq, admitted):
    workload = build_workload(make_eval_spec(), "rl-000000000001", make_settings(kueue_queue="rljob-v6e"))
    demand = kueue_setup.demand_of(workload)
    wl = {"spec": {"podSets": pod_sets({**to_plain(workload.job), "kind": "Job"})}}
    refused = kueue_setup.refusal(_chain(cq), demand)
    assigned = emulated.assign_flavors(wl, cq, RESOURCE_FLAVORS, {}, "flavor-keys")
    assert (refused is None, bool(assigned.pod_sets)) == (admitted, admitted), (refused, assigned.message)
    if admitted:
        assert {f for ps in assigned.pod_sets for f in ps["flavors"].values()} == {"cpu-eval"}
    else:
        assert refused is not None and "rljob.dev/capacity=cpu-eval" in refused and "ResourceFlavor cpu-eval" in refused, refused


def test_a_tpu_job_is_never_taken_by_the_eval_flavor():
    """The eval flavor in the group changes nothing for TPU jobs: with only it and the on-demand flavor, a spot job is
    refused (its quota and labels are for eval pods), an on-demand one goes on-demand."""
    cq = _with_eval()
    cq["spec"]["resourceGroups"][0]["flavors"] = [
        f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] in ("cpu-eval", "tpu-v6e-2x4-on-demand")
    ]
    for capacity, flavor in (("on-demand", "tpu-v6e-2x4-on-demand"), ("spot", None)):
        demand, wl = _job(capacity)
        assigned = emulated.assign_flavors(wl, cq, RESOURCE_FLAVORS, {}, "flavor-keys")
        refused = kueue_setup.refusal(_chain(cq), demand)
        assert (refused is None) == bool(assigned.pod_sets) == (flavor is not None), (capacity, refused, assigned.message)
        if flavor is not None:
            assert {f for ps in assigned.pod_sets for f in ps["flavors"].values()} == {flavor}
