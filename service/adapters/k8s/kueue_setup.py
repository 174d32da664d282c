"""Which Kueue ResourceFlavor can take a job: pure functions over the JSON of a team's queue chain
(LocalQueue -> ClusterQueue -> ResourceFlavors) and the job's rendered pod template. No I/O: reading
the chain is service/adapters/k8s_cluster/kueue_chain.py's (ClusterQueues and ResourceFlavors are
cluster-scoped, which the launcher's namespaced Role cannot grant).

"Can take" follows Kueue v0.19.2's flavor assigner (pkg/scheduler/flavorassigner/flavorassigner.go,
`assignFlavors` / `findFlavorForPodSets` / `checkFlavorForPodSets` / `flavorSelector`), on what can never
change rather than on what is free now:
- every resource the pod set requests (pods x the per-pod request; `pods` too when a resource group covers
  it) must be covered by a resource group, else Kueue says "resource X unavailable in ClusterQueue";
- in that group, some flavor must match the pod: the pod's nodeSelector and each required node affinity
  term's matchExpressions are cut to the label keys the flavor itself names (PR #12449, v0.19.x); a term
  left empty drops the affinity (terms are ORed); what is left must match a node carrying only the
  flavor's nodeLabels (RequiredNodeAffinity.Match);
- and that flavor's nominalQuota of each resource of the group the pod requests must hold the whole request:
  a request above the nominal quota waits forever (borrowing from a cohort is not counted: our
  ClusterQueues have none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

from kubernetes.utils.quantity import parse_quantity

from .accelerators import TPU_RESOURCE
from .capacity import CAPACITY_LABEL, EVAL_POOL
from .manifests import Workload
from .serialize import to_plain

_parse_quantity = cast(Callable[[Any], Decimal], parse_quantity)
PODS_RESOURCE = "pods"  # counted only when a resource group covers it (assignFlavors)


@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: dict[str, str]
    tpu_quota: Decimal  # nominalQuota of google.com/tpu in the ClusterQueue (0: the flavor lists none)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    quotas: dict[str, Decimal] = field(default_factory=dict)  # nominalQuota per resource of its resource group

    @property
    def capacity(self) -> str:
        return self.node_labels.get(CAPACITY_LABEL, "any")

    def quota(self, resource: str) -> Decimal:
        if resource == TPU_RESOURCE and resource not in self.quotas:
            return self.tpu_quota
        return self.quotas.get(resource, Decimal(0))


@dataclass(frozen=True)
class ResourceGroup:
    """One of the ClusterQueue's resourceGroups: the resources it covers and its flavors, in order."""

    covered: tuple[str, ...]
    flavors: list[Flavor]
    missing_flavors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class QueueChain:
    """A LocalQueue's ClusterQueue and the flavors of its resource group that covers google.com/tpu (every
    group's when none does); `groups` holds every resource group, which the quota check walks."""

    local_queue: str
    cluster_queue: str
    flavors: list[Flavor]
    covers_tpu: bool  # some resource group covers google.com/tpu
    missing_flavors: list[str] = field(default_factory=list)  # referenced, but no such ResourceFlavor
    groups: list[ResourceGroup] = field(default_factory=list)

    def resource_groups(self) -> list[ResourceGroup]:
        """The groups; a chain built with none is the one TPU group its flavors stand for."""
        if self.groups:
            return self.groups
        return [ResourceGroup((TPU_RESOURCE,), self.flavors, self.missing_flavors)] if self.covers_tpu else []


@dataclass(frozen=True)
class Demand:
    """What a job asks of a flavor: its pods' node selector and required node affinity terms, its pod count,
    and what one pod requests (limits standing in for unset requests)."""

    node_selector: dict[str, str]
    pods: int
    chips_per_pod: int
    affinity_terms: list[dict[str, Any]] | None = None  # requiredDuringScheduling nodeSelectorTerms; None: none
    per_pod: dict[str, Decimal] = field(default_factory=dict)

    @property
    def chips(self) -> int:
        return self.pods * self.chips_per_pod

    def requests(self, count_pods: bool) -> dict[str, Decimal]:
        """The pod set's total request per resource (Kueue's totalRequests x count)."""
        per_pod = dict(self.per_pod) if self.per_pod else {TPU_RESOURCE: Decimal(self.chips_per_pod)}
        out = {name: qty * self.pods for name, qty in per_pod.items()}
        if count_pods:
            out[PODS_RESOURCE] = Decimal(self.pods)
        return out


def inactive_reason(obj: dict[str, Any]) -> str | None:
    """ "Reason: message" of a Kueue object whose Active condition is False; None when active or unknown."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Active" and cond.get("status") == "False":
            return f"{cond.get('reason') or 'Inactive'}: {cond.get('message') or 'no message'}"
    return None


def group_quotas(cluster_queue: dict[str, Any]) -> list[tuple[tuple[str, ...], list[tuple[str, dict[str, Decimal]]]]]:
    """Every resource group: (coveredResources, [(flavor, {resource: nominalQuota})]), in order."""
    out = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        flavors = []
        for flavor in group.get("flavors") or []:
            quotas = {
                str(r.get("name")): _parse_quantity(r.get("nominalQuota") if r.get("nominalQuota") is not None else 0)
                for r in flavor.get("resources") or []
            }
            flavors.append((str(flavor.get("name")), quotas))
        out.append((tuple(str(r) for r in group.get("coveredResources") or []), flavors))
    return out


def admission_checks(cluster_queue: dict[str, Any]) -> list[str]:
    """The AdmissionCheck names a ClusterQueue references (v1beta2 admissionChecksStrategy; the older
    spec.admissionChecks list too, should a conversion leave it)."""
    spec = cluster_queue.get("spec") or {}
    names = [str(c.get("name")) for c in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []]
    names += [str(n) for n in spec.get("admissionChecks") or []]
    return list(dict.fromkeys(n for n in names if n))


def make_flavor(name: str, quota: Decimal, resource_flavor: dict[str, Any], quotas: dict[str, Decimal] | None = None) -> Flavor:
    spec = resource_flavor.get("spec") or {}
    return Flavor(name, dict(spec.get("nodeLabels") or {}), quota, list(spec.get("tolerations") or []), dict(quotas or {}))


def pod_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """What one pod requests, as Kueue sums it (workload.AdjustResources: a container's limits stand in for its
    unset requests; then component-helpers PodRequests: containers summed, restartable (sidecar) init
    containers added, the largest need of any init container taken if larger, pod overhead on top)."""

    def wanted(container: dict[str, Any]) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        return {k: _parse_quantity(v) for k, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items()}

    def add(into: dict[str, Decimal], more: dict[str, Decimal]) -> dict[str, Decimal]:
        return {k: into.get(k, Decimal(0)) + more.get(k, Decimal(0)) for k in {*into, *more}}

    total: dict[str, Decimal] = {}
    for container in pod.get("containers") or []:
        total = add(total, wanted(container))
    sidecars: dict[str, Decimal] = {}
    init_max: dict[str, Decimal] = {}
    for container in pod.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            total, sidecars = add(total, wanted(container)), add(sidecars, wanted(container))
            need = sidecars
        else:
            need = add(wanted(container), sidecars)
        init_max = {k: max(init_max.get(k, Decimal(0)), need.get(k, Decimal(0))) for k in {*init_max, *need}}
    total = {k: max(total.get(k, Decimal(0)), init_max.get(k, Decimal(0))) for k in {*total, *init_max}}
    overhead = {k: _parse_quantity(v) for k, v in (pod.get("overhead") or {}).items()}
    return add(total, overhead)


def demand_of(workload: Workload) -> Demand:
    """Node selection, pod count and per-pod requests of a rendered Job or JobSet."""
    if workload.job is not None:
        job_spec: dict[str, Any] = to_plain(workload.job)["spec"]
        replicas = 1
    else:
        assert workload.jobset is not None
        replicated = workload.jobset["spec"]["replicatedJobs"][0]
        job_spec, replicas = replicated["template"]["spec"], int(replicated.get("replicas", 1))
    pod = job_spec["template"]["spec"]
    per_pod = pod_requests(pod)
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return Demand(
        dict(pod.get("nodeSelector") or {}),
        replicas * int(job_spec.get("parallelism") or 1),
        int(per_pod.get(TPU_RESOURCE, 0)),
        None if required is None else list(required.get("nodeSelectorTerms") or []),
        per_pod,
    )


def _requirement_matches(req: dict[str, Any], labels: dict[str, str]) -> bool:
    """labels.Requirement.Matches for a NodeSelectorRequirement's operators (k8s.io/component-helpers
    nodeaffinity); an operator the API server would not accept matches nothing."""
    key, op, values = req.get("key"), req.get("operator"), [str(v) for v in req.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def flavor_selector_matches(node_selector: dict[str, str], terms: list[dict[str, Any]] | None, flavor_labels: dict[str, str]) -> bool:
    """Kueue v0.19.2 flavorSelector, then RequiredNodeAffinity.Match against a node carrying only the flavor's
    nodeLabels: the selector and each term's matchExpressions cut to the flavor's own keys; a term left empty
    (matchFields are not copied) drops the whole affinity; the terms are ORed, a term's expressions ANDed."""
    if any(flavor_labels[k] != v for k, v in node_selector.items() if k in flavor_labels):
        return False
    if not terms:
        return True
    cut = []
    for term in terms:
        kept = [e for e in term.get("matchExpressions") or [] if e.get("key") in flavor_labels]
        if not kept:
            return True
        cut.append(kept)
    return any(all(_requirement_matches(e, flavor_labels) for e in kept) for kept in cut)


def _term_text(term: dict[str, Any]) -> str:
    parts = []
    for e in term.get("matchExpressions") or []:
        values = [str(v) for v in e.get("values") or []]
        op = e.get("operator")
        if op == "In" and len(values) == 1:
            parts.append(f"{e.get('key')}={values[0]}")
        else:
            parts.append(f"{e.get('key')} {op}{' ' + ','.join(values) if values else ''}")
    return " and ".join(parts) or "any node"


def selection_text(demand: Demand) -> str:
    """What the job's pods select, for messages: the node selector, and one of the affinity's terms."""
    parts = [f"{k}={v}" for k, v in sorted(demand.node_selector.items())]
    if demand.affinity_terms:
        parts.append("one of [" + " | ".join(_term_text(t) for t in demand.affinity_terms) + "]")
    return ", ".join(parts) or "any node"


def label_mismatch(flavor: Flavor, demand: Demand) -> str | None:
    """Why the flavor's node labels exclude the pod (Kueue's rule: only the flavor's own keys count)."""
    for key, value in flavor.node_labels.items():
        if key in demand.node_selector and demand.node_selector[key] != value:
            return f"it labels {key}={value}, the job selects {key}={demand.node_selector[key]}"
    if not flavor_selector_matches(demand.node_selector, demand.affinity_terms, flavor.node_labels):
        keys = {e.get("key") for t in demand.affinity_terms or [] for e in t.get("matchExpressions") or []}
        labels = ", ".join(f"{k}={v}" for k, v in sorted(flavor.node_labels.items()) if k in keys)
        return f"it labels {labels}, which no term of the job's node affinity matches"
    return None


def format_quantity(value: Decimal, resource: str) -> str:
    """A quantity as a manifest would say it: binary suffixes for memory, m for fractions."""
    if value != value.to_integral_value():
        return f"{int(value * 1000)}m"
    n = int(value)
    if resource in ("memory", "ephemeral-storage") and n:
        for suffix, size in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
            if n % size == 0:
                return f"{n // size}{suffix}"
    return str(n)


def _tpu_first(resource: str) -> tuple[bool, str]:
    return (resource != TPU_RESOURCE, resource)


def quota_shortfall(flavor: Flavor, requests: dict[str, Decimal], demand: Demand) -> str | None:
    """Why the flavor's nominal quota can never hold the pod set's request (fitsResourceQuota with nothing
    in use); None when every requested resource fits."""
    short = []
    for resource in sorted(requests, key=_tpu_first):
        need, quota = requests[resource], flavor.quota(resource)
        if need > quota:
            each = "" if resource == PODS_RESOURCE else f" ({demand.pods} pod(s) x {format_quantity(need / demand.pods, resource)})"
            short.append(
                f"its {resource} quota is {format_quantity(quota, resource)}, the job needs {format_quantity(need, resource)}{each}"
            )
    return " and ".join(short) or None


def why_not(flavor: Flavor, demand: Demand, requests: dict[str, Decimal] | None = None) -> str | None:
    """None when the flavor can take the job (`requests`: the pod set's, in the flavor's group), else why not."""
    mismatch = label_mismatch(flavor, demand)
    if mismatch is not None:
        return mismatch
    if requests is None:
        requests = {TPU_RESOURCE: Decimal(demand.chips)} if demand.chips else {}
    return quota_shortfall(flavor, requests, demand)


def _flavor_reasons(group: ResourceGroup, demand: Demand, requests: dict[str, Decimal]) -> list[str] | None:
    """Why no flavor of the group takes the pod set; None when one does (findFlavorForPodSets)."""
    reasons = []
    for flavor in group.flavors:
        why = why_not(flavor, demand, requests)
        if why is None:
            return None
        shown = [TPU_RESOURCE] if TPU_RESOURCE in requests else sorted(requests)
        quota = ", ".join(f"{format_quantity(flavor.quota(r), r)} {r}" for r in shown)
        reasons.append(f"{flavor.name} (capacity {flavor.capacity}{', ' + quota if quota else ''}): {why}")
    return reasons + [f"{name}: no such ResourceFlavor" for name in group.missing_flavors]


def refusal(chain: QueueChain, demand: Demand) -> str | None:
    """A sentence for the 422 when no flavor of the chain can take the job; None when one can."""
    where = f"ClusterQueue {chain.cluster_queue} (LocalQueue {chain.local_queue})"
    groups = chain.resource_groups()
    requests = demand.requests(any(PODS_RESOURCE in g.covered for g in groups))
    done: set[str] = set()
    for resource in sorted(requests, key=_tpu_first):
        if resource in done:
            continue
        group = next((g for g in groups if resource in g.covered), None)
        if group is None:
            if not requests[resource]:
                continue
            if resource == TPU_RESOURCE:
                return (
                    f"{where} has no resource group covering {TPU_RESOURCE}, so Kueue can never admit this TPU job; "
                    f"an admin adds {TPU_RESOURCE} quota to it (k8s/kueue/)"
                )
            return (
                f"{where} has no resource group covering {resource} (Kueue: resource {resource} unavailable in ClusterQueue), "
                f"and the job requests {format_quantity(requests[resource], resource)} {resource}, so Kueue can never admit it; "
                f"an admin adds {resource} to a resource group's coveredResources with quota (k8s/kueue/)"
            )
        covered = {r: q for r, q in requests.items() if r in group.covered}
        done.update(covered)
        reasons = _flavor_reasons(group, demand, covered)
        if reasons is None:
            continue
        needs = ", ".join(
            f"{format_quantity(q, r)} {r}"
            + (f" ({demand.pods} pod(s) x {format_quantity(q / demand.pods, r)})" if r != PODS_RESOURCE else "")
            for r, q in sorted(covered.items(), key=lambda kv: _tpu_first(kv[0]))
        )
        if demand.node_selector.get(CAPACITY_LABEL) == EVAL_POOL:
            fix = (
                f"An eval job runs in the eval pool's flavor: ask an admin to add ResourceFlavor {EVAL_POOL} with cpu and memory "
                "quota to the ClusterQueue (k8s/kueue/, docs/deploy-gke.md), or to lower RLJOB_K8S_CPU_JOB_CPU / RLJOB_K8S_CPU_JOB_MEMORY"
            )
        else:
            fix = (
                "Ask for a capacity a flavor offers (hardware.capacity) or a smaller slice, or ask an admin for a "
                "ResourceFlavor with those node labels and enough quota in the ClusterQueue"
            )
        return (
            f"no flavor of {where} can take this job: its pods select {selection_text(demand)} and it needs {needs}; "
            f"flavors: {'; '.join(reasons) or 'none'}. {fix}"
        )
    return None
