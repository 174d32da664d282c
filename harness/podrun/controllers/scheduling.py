"""The nodes of the emulated cluster, and the scheduler's fit checks against them (pure).

This machine is the node. By default it carries the labels every node has and its real CPU count and
memory as allocatable, no taints and no accelerators, so a TPU pod stays Pending/Unschedulable, as it
would on a cluster without a TPU pool. Tests that want TPU-shaped pods scheduled (with fake commands)
pass a node that carries a TPU pool's labels, taint and google.com/tpu.
Checked: nodeSelector and required node affinity (NodeAffinity's RequiredNodeAffinity: terms ORed, expressions
ANDed, In/NotIn/Exists/DoesNotExist/Gt/Lt), taints/tolerations (NoSchedule, NoExecute), resource requests
(limits where a request is unset, as the API defaults them; sidecars added, init containers as the largest need,
`requests_of`) against allocatable minus the pods already running.
Not emulated: preferred node affinity, matchFields, pod (anti-)affinity, topology spread, priorities and preemption.

Several nodes (EmulatedCluster(nodes=[...])): `node_reasons` runs kube-scheduler's default filters in
their plugin order (TaintToleration, NodeAffinity, NodeResourcesFit; the first that fails is the node's
status), `pick_node` takes the first feasible node in list order (kube-scheduler scores the feasible
ones; there is no scoring here), and `fit_error` writes FitError.Error's message with the preemption
PostFilter's (kubernetes pkg/scheduler/framework/types.go, pkg/scheduler/framework/preemption).
`Node.gke_tpu` / `Node.gke_cpu` carry the labels, taints and allocatable GKE puts on such nodes. All
nodes' pods still run as processes on this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from harness.podrun.pods.quantity import parse_quantity
from harness.podrun.pods.volumes import NotEmulated

NODE_NAME = "podrun-node"
# Our own node-pool label (service/adapters/k8s/capacity.py CAPACITY_LABEL): the operator sets it on each
# TPU pool; spelled out here so the emulator states the cluster's facts instead of importing our code.
CAPACITY_LABEL = "rljob.dev/capacity"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


@dataclass(frozen=True)
class GkeTpuVm:
    """A GKE TPU VM as its node shows it: `cloud.google.com/gke-tpu-accelerator`, its chips, and its allocatable:
    the VM's vCPUs and memory less what GKE reserves for the kubelet and the system plus its 100Mi eviction
    threshold (GKE's "Plan GKE Standard node sizes": CPU 6% of the first core, 1% of the next, 0.5% of the next 2,
    0.25% above 4; memory 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112, 2% above).
    """

    accelerator: str
    chips: int
    cpu: str
    memory: str


# Machine type -> VM; the vCPUs and memory from GKE's "Plan TPUs" tables (v6e) and Cloud TPU's "TPU v5e" page.
GKE_TPU_VMS: dict[str, GkeTpuVm] = {
    "ct6e-standard-8t": GkeTpuVm("tpu-v6e-slice", 8, "179", "1400Gi"),  # 180 vCPU, 1440 GB
    "ct6e-standard-4t": GkeTpuVm("tpu-v6e-slice", 4, "179", "698Gi"),  # 180 vCPU, 720 GB
    "ct5lp-hightpu-1t": GkeTpuVm("tpu-v5-lite-podslice", 1, "23870m", "43Gi"),  # 24 vCPU, 48 GB
    "ct5lp-hightpu-4t": GkeTpuVm("tpu-v5-lite-podslice", 4, "111650m", "181Gi"),  # 112 vCPU, 192 GB
    "ct5lp-hightpu-8t": GkeTpuVm("tpu-v5-lite-podslice", 8, "223370m", "369Gi"),  # 224 vCPU, 384 GB
    # 224 vCPU, 960 GB (Cloud TPU's "TPU7x (Ironwood)" page); label value "tpu7x" (GKE's Ironwood guides, xpk).
    "tpu7x-standard-4t": GkeTpuVm("tpu7x", 4, "223370m", "933Gi"),
}


def _memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 8 * 1024**3


@dataclass(frozen=True)
class Node:
    name: str = NODE_NAME
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    allocatable: dict[str, str] = field(default_factory=dict)

    @classmethod
    def local(cls, **overrides: Any) -> Node:
        values: dict[str, Any] = {
            "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
            "allocatable": {"cpu": str(os.cpu_count() or 1), "memory": str(_memory_bytes()), "pods": "110"},
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def gke_tpu(
        cls,
        name: str,
        capacity: str = "on-demand",
        *,
        pool: str | None = None,
        reservation: str | None = None,
        topology: str = "2x4",
        machine_type: str = "ct6e-standard-8t",
        chips: int | None = None,
        labels: dict[str, str] | None = None,
    ) -> Node:
        """A TPU VM of `machine_type` (GKE_TPU_VMS; `chips`: the node's google.com/tpu, by default the VM's) as GKE
        labels, taints and sizes it (GKE "Plan TPUs" / node pool docs; xpk capacity.py), plus the
        capacity label the operator adds to each pool (docs/deploy-gke.md). Spot pools get GKE's spot label and the
        spot taint the pool is created with.

        Nothing else is assumed of a reservation pool: no source says GKE labels the nodes of a hand-made pool
        with `cloud.google.com/reservation-name` (xpk relies on it only for pools node auto-provisioning creates;
        PerfKitBenchmarker sets it itself in `--node-labels`). So the node carries it only when asked:
        `reservation=NAME` means exactly "the pool command put `cloud.google.com/reservation-name=NAME` on it",
        and `labels=` merges in whatever else the pool's `--node-labels` gives (last, so it wins). A test that
        stands for the guide's pool passes what the guide's command gives
        (tests/k8s/test_reservation_pool_from_guide.py builds it from docs/deploy-gke.md)."""
        vm = GKE_TPU_VMS[machine_type]
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "cloud.google.com/gke-nodepool": pool or f"tpu-{capacity}",
            "node.kubernetes.io/instance-type": machine_type,
            "cloud.google.com/gke-tpu-accelerator": vm.accelerator,
            "cloud.google.com/gke-tpu-topology": topology,
            CAPACITY_LABEL: capacity,
        }
        taints = [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
        if capacity == "spot":
            node_labels["cloud.google.com/gke-spot"] = "true"
            taints.append({"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"})
        if reservation is not None:
            node_labels["cloud.google.com/reservation-name"] = reservation
        node_labels.update(labels or {})
        tpus = str(vm.chips if chips is None else chips)
        return cls(
            name=name,
            labels=node_labels,
            taints=taints,
            allocatable={"cpu": vm.cpu, "memory": vm.memory, "google.com/tpu": tpus, "pods": "110"},
        )

    @classmethod
    def gke_cpu(
        cls,
        name: str,
        *,
        pool: str = "default-pool",
        machine_type: str = "e2-standard-4",
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> Node:
        """A plain GKE node (e2-standard-4: 4 vCPU, 16 GB; allocatable as GKE reserves), no taints; `labels` and
        `taints`: what the pool's --node-labels and --node-taints add (a test builds them from the guide's command)."""
        return cls(
            name=name,
            labels={
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "cloud.google.com/gke-nodepool": pool,
                "node.kubernetes.io/instance-type": machine_type,
                **(labels or {}),
            },
            taints=list(taints or []),
            allocatable={"cpu": "3920m", "memory": "13Gi", "pods": "110"},
        )


def _wanted(container: dict[str, Any]) -> dict[str, Decimal]:
    """A container's requests, its limits standing in for unset ones (pkg/apis/core/v1/defaults.go SetDefaults_Pod,
    for containers and init containers alike)."""
    res = container.get("resources") or {}
    return {k: parse_quantity(str(v)) for k, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items()}


def _add(into: dict[str, Decimal], more: dict[str, Decimal]) -> dict[str, Decimal]:
    return {k: into.get(k, Decimal(0)) + more.get(k, Decimal(0)) for k in {*into, *more}}


def requests_of(pod_spec: dict[str, Any]) -> dict[str, Decimal]:
    """What a pod requests (component-helpers resource/helpers.go AggregateContainerRequests at c4b5de20): the
    regular containers and the sidecars summed, then at least what any init container needs while it runs
    (itself plus the sidecars declared before it). Pod overhead and pod-level resources are not added."""
    total: dict[str, Decimal] = {}
    for c in pod_spec.get("containers") or []:
        total = _add(total, _wanted(c))
    sidecars: dict[str, Decimal] = {}
    init_max: dict[str, Decimal] = {}
    for c in pod_spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            total, sidecars = _add(total, _wanted(c)), _add(sidecars, _wanted(c))
            need = sidecars
        else:
            need = _add(_wanted(c), sidecars)
        init_max = {k: max(init_max.get(k, Decimal(0)), need.get(k, Decimal(0))) for k in {*init_max, *need}}
    return {k: max(total.get(k, Decimal(0)), init_max.get(k, Decimal(0))) for k in {*total, *init_max}}


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _requirement_matches(req: dict[str, Any], labels: dict[str, str]) -> bool:
    """k8s.io/apimachinery labels.Requirement.Matches, for the operators a NodeSelectorRequirement takes
    (k8s.io/component-helpers/scheduling/corev1/nodeaffinity NodeSelectorRequirementsAsSelector)."""
    key, op, values = req["key"], req["operator"], list(req.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    raise NotEmulated(f"node selector operator {op!r}")


def node_selector_terms_match(terms: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """nodeaffinity.nodeSelectorTerms.Match (kubernetes v1.35 component-helpers): the terms are ORed, a term's
    expressions ANDed; a term with no requirements matches nothing. matchFields (metadata.name) is not emulated."""
    for term in terms:
        if term.get("matchFields"):
            raise NotEmulated("matchFields in a node selector term")
        reqs = term.get("matchExpressions") or []
        if reqs and all(_requirement_matches(r, labels) for r in reqs):
            return True
    return False


def required_affinity_terms(pod_spec: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The pod's requiredDuringSchedulingIgnoredDuringExecution node selector terms; None when it has none."""
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return None if required is None else list(required.get("nodeSelectorTerms") or [])


def _affinity_matches(pod_spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """nodeaffinity.RequiredNodeAffinity.Match: every nodeSelector label, and (if any) one required term."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    terms = required_affinity_terms(pod_spec)
    return terms is None or node_selector_terms_match(terms, labels)


def _unemulated_placement(pod_spec: dict[str, Any]) -> None:
    affinity = pod_spec.get("affinity") or {}
    if (affinity.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution"):
        raise NotEmulated("preferred node affinity (scoring) is not emulated by the scheduler")
    # Pod (anti-)affinity is not checked (one pod of each kind per test: it would not change a placement).
    if pod_spec.get("topologySpreadConstraints"):
        raise NotEmulated("topology spread is not emulated by the scheduler")


def unschedulable(pod_spec: dict[str, Any], node: Node, running: list[dict[str, Any]]) -> str | None:
    """The scheduler's message when the pod cannot go on the node now; None when it fits."""
    prefix = "0/1 nodes are available: 1 "
    _unemulated_placement(pod_spec)
    if not _affinity_matches(pod_spec, node.labels):
        return (
            prefix + "node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: "
            "1 Preemption is not helpful for scheduling."
        )
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod_spec.get("tolerations") or [], taint):
            return prefix + f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}."
    used: dict[str, Decimal] = {}
    for other in running:
        for k, v in requests_of(other).items():
            used[k] = used.get(k, Decimal(0)) + v
    short = [
        name
        for name, qty in requests_of(pod_spec).items()
        if qty > 0 and qty + used.get(name, Decimal(0)) > parse_quantity(node.allocatable.get(name, "0"))
    ]
    if short:
        return "0/1 nodes are available: " + ", ".join(f"1 Insufficient {name}" for name in sorted(short)) + "."
    return None


def node_reasons(pod_spec: dict[str, Any], node: Node, running: list[dict[str, Any]]) -> list[str]:
    """Why kube-scheduler's filters reject the node ([] = feasible): TaintToleration, then NodeAffinity, then
    NodeResourcesFit, as the default profile orders them; only the first failing plugin's reasons count."""
    _unemulated_placement(pod_spec)
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod_spec.get("tolerations") or [], taint):
            return [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"]
    if not _affinity_matches(pod_spec, node.labels):
        return [AFFINITY_MISMATCH]
    used: dict[str, Decimal] = {}
    for other in running:
        for k, v in requests_of(other).items():
            used[k] = used.get(k, Decimal(0)) + v
    return [
        f"Insufficient {name}"
        for name, qty in sorted(requests_of(pod_spec).items())
        if qty > 0 and qty + used.get(name, Decimal(0)) > parse_quantity(node.allocatable.get(name, "0"))
    ]


def pick_node(pod_spec: dict[str, Any], nodes: list[Node], running: dict[str, list[dict[str, Any]]]) -> tuple[Node | None, str | None]:
    """(the first feasible node, None), or (None, the FitError message)."""
    statuses = {}
    for node in nodes:
        reasons = node_reasons(pod_spec, node, running.get(node.name, []))
        if not reasons:
            return node, None
        statuses[node.name] = reasons
    return None, fit_error(len(nodes), statuses)


def _histogram(reasons: list[str]) -> str:
    counts: dict[str, int] = {}
    for r in reasons:
        counts[r] = counts.get(r, 0) + 1
    return ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))  # sort.Strings over "<count> <reason>"


def fit_error(num_nodes: int, statuses: dict[str, list[str]]) -> str:
    """FitError.Error(): "0/N nodes are available: <sorted histogram>." then the preemption PostFilter's message.
    Preemption cannot help on a node rejected as UnschedulableAndUnresolvable (taints, affinity); on one short
    of resources it finds no victims here (no lower-priority pods are emulated)."""
    reasons = [r for node_reasons in statuses.values() for r in node_reasons]
    preemption = [NO_VICTIMS if all(r.startswith("Insufficient ") for r in rs) else NOT_HELPFUL for rs in statuses.values()]
    return (
        f"0/{num_nodes} nodes are available: {_histogram(reasons)}. "
        f"preemption: 0/{num_nodes} nodes are available: {_histogram(preemption)}."
    )
