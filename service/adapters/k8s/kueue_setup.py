"""Which Kueue ResourceFlavor can take a job: pure functions over the JSON of a team's queue chain
(LocalQueue -> ClusterQueue -> ResourceFlavors) and the job's rendered pod template. No I/O: reading
the chain is service/adapters/k8s_cluster/kueue_chain.py's (ClusterQueues and ResourceFlavors are
cluster-scoped, which the launcher's namespaced Role cannot grant).

"Can take" follows Kueue v0.19.2 (pkg/scheduler/flavorassigner/flavorassigner.go, `flavorSelector`): a
flavor is compared with the pod on the label keys the flavor itself names; a key the pod does not select
matches anything, a key the pod selects must have the flavor's value. On top, the flavor's nominalQuota of
google.com/tpu in the resource group covering it must hold the whole job (pods x chips per pod): Kueue
admits a workload's pod sets into one flavor, and a job larger than the quota waits forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

from kubernetes.utils.quantity import parse_quantity

from .accelerators import TPU_RESOURCE
from .capacity import CAPACITY_LABEL
from .manifests import Workload
from .serialize import to_plain

_parse_quantity = cast(Callable[[Any], Decimal], parse_quantity)


@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: dict[str, str]
    tpu_quota: Decimal  # nominalQuota of google.com/tpu in the ClusterQueue (0: the flavor lists none)
    tolerations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def capacity(self) -> str:
        return self.node_labels.get(CAPACITY_LABEL, "any")


@dataclass(frozen=True)
class QueueChain:
    """A LocalQueue's ClusterQueue and the flavors of its resource group that covers google.com/tpu."""

    local_queue: str
    cluster_queue: str
    flavors: list[Flavor]
    covers_tpu: bool  # some resource group covers google.com/tpu
    missing_flavors: list[str] = field(default_factory=list)  # referenced, but no such ResourceFlavor


@dataclass(frozen=True)
class Demand:
    """What a job asks of a flavor: its pods' node selector and google.com/tpu in all."""

    node_selector: dict[str, str]
    pods: int
    chips_per_pod: int

    @property
    def chips(self) -> int:
        return self.pods * self.chips_per_pod


def inactive_reason(obj: dict[str, Any]) -> str | None:
    """ "Reason: message" of a Kueue object whose Active condition is False; None when active or unknown."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Active" and cond.get("status") == "False":
            return f"{cond.get('reason') or 'Inactive'}: {cond.get('message') or 'no message'}"
    return None


def flavor_quotas(cluster_queue: dict[str, Any]) -> tuple[list[tuple[str, Decimal]], bool]:
    """(flavor, google.com/tpu nominalQuota) of the resource group covering google.com/tpu, in order,
    and whether any group covers it; without one, the flavors of every group with quota 0."""
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    for group in groups:
        if TPU_RESOURCE in (group.get("coveredResources") or []):
            out = []
            for flavor in group.get("flavors") or []:
                quota = next((r.get("nominalQuota") for r in flavor.get("resources") or [] if r.get("name") == TPU_RESOURCE), 0)
                out.append((str(flavor.get("name")), _parse_quantity(quota if quota is not None else 0)))
            return out, True
    return [(str(f.get("name")), Decimal(0)) for g in groups for f in g.get("flavors") or []], False


def admission_checks(cluster_queue: dict[str, Any]) -> list[str]:
    """The AdmissionCheck names a ClusterQueue references (v1beta2 admissionChecksStrategy; the older
    spec.admissionChecks list too, should a conversion leave it)."""
    spec = cluster_queue.get("spec") or {}
    names = [str(c.get("name")) for c in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []]
    names += [str(n) for n in spec.get("admissionChecks") or []]
    return list(dict.fromkeys(n for n in names if n))


def make_flavor(name: str, quota: Decimal, resource_flavor: dict[str, Any]) -> Flavor:
    spec = resource_flavor.get("spec") or {}
    return Flavor(name, dict(spec.get("nodeLabels") or {}), quota, list(spec.get("tolerations") or []))


def demand_of(workload: Workload) -> Demand:
    """Node selector, pod count and chips per pod of a rendered Job or JobSet."""
    if workload.job is not None:
        job_spec: dict[str, Any] = to_plain(workload.job)["spec"]
        replicas = 1
    else:
        assert workload.jobset is not None
        replicated = workload.jobset["spec"]["replicatedJobs"][0]
        job_spec, replicas = replicated["template"]["spec"], int(replicated.get("replicas", 1))
    pod = job_spec["template"]["spec"]
    chips = sum(int(_parse_quantity((c.get("resources") or {}).get("requests", {}).get(TPU_RESOURCE, 0))) for c in pod["containers"])
    return Demand(dict(pod.get("nodeSelector") or {}), replicas * int(job_spec.get("parallelism") or 1), chips)


def label_mismatch(flavor: Flavor, selector: dict[str, str]) -> str | None:
    """Why the flavor's node labels exclude the pod (Kueue's rule: only the flavor's own keys count)."""
    for key, value in flavor.node_labels.items():
        if key in selector and selector[key] != value:
            return f"it labels {key}={value}, the job selects {key}={selector[key]}"
    return None


def why_not(flavor: Flavor, demand: Demand) -> str | None:
    """None when the flavor can take the job, else why not."""
    mismatch = label_mismatch(flavor, demand.node_selector)
    if mismatch is not None:
        return mismatch
    if demand.chips and flavor.tpu_quota < demand.chips:
        return f"its {TPU_RESOURCE} quota is {flavor.tpu_quota}, the job needs {demand.chips}"
    return None


def refusal(chain: QueueChain, demand: Demand) -> str | None:
    """A sentence for the 422 when no flavor of the chain can take the job; None when one can."""
    if demand.chips and not chain.covers_tpu:
        return (
            f"ClusterQueue {chain.cluster_queue} (LocalQueue {chain.local_queue}) has no resource group covering "
            f"{TPU_RESOURCE}, so Kueue can never admit this TPU job; an admin adds {TPU_RESOURCE} quota to it (k8s/kueue/)"
        )
    reasons = []
    for flavor in chain.flavors:
        why = why_not(flavor, demand)
        if why is None:
            return None
        reasons.append(f"{flavor.name} (capacity {flavor.capacity}, {flavor.tpu_quota} {TPU_RESOURCE}): {why}")
    reasons += [f"{name}: no such ResourceFlavor" for name in chain.missing_flavors]
    selected = ", ".join(f"{k}={v}" for k, v in sorted(demand.node_selector.items())) or "any node"
    return (
        f"no flavor of ClusterQueue {chain.cluster_queue} (LocalQueue {chain.local_queue}) can take this job: its pods "
        f"select {selected} and it needs {demand.chips} {TPU_RESOURCE} ({demand.pods} pod(s) x {demand.chips_per_pod}); "
        f"flavors: {'; '.join(reasons) or 'none'}. Ask for a capacity a flavor offers (hardware.capacity) or a smaller "
        "slice, or ask an admin for a ResourceFlavor with those node labels and enough quota in the ClusterQueue"
    )
