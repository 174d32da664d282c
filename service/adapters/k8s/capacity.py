"""How a job's `hardware.capacity` reaches GKE: the node labels a trainer pod selects and the taints it
tolerates for each kind of TPU capacity (the Kueue ResourceFlavors in k8s/kueue/ name the same labels).

Routing rests on one label of ours, `rljob.dev/capacity`, that the operator puts on every TPU node pool
(`gcloud container node-pools create ... --node-labels=rljob.dev/capacity=spot`, docs/deploy-gke.md) and
that every TPU pod and every ResourceFlavor carries with one value per capacity. Why one shared key:
Kueue matches a pod against a flavor on label keys only. Up to v0.17.5 and v0.18.0-1 those are the keys of
all flavors in the resource group; since kueue PR #12449 (v0.17.6+, v0.18.2+, v0.19.x) only that
flavor's own keys (`pkg/scheduler/flavorassigner/flavorassigner.go`, `flavorSelector`). A flavor
without a key the pod selects then matches every pod; with one key in every flavor, each capacity lands
in its own flavor under both rules.

GKE's own labels ride along where GKE sets them (docs, 2026): Spot VMs carry
`cloud.google.com/gke-spot=true` (and a spot pool created with the matching NoSchedule taint keeps other
pods off). A reservation pod selects `cloud.google.com/reservation-name` (what xpk selects,
`src/xpk/core/capacity.py`); GKE sets that label itself only on pools node auto-provisioning creates, so the
guide's pool command puts it in `--node-labels`, as PerfKitBenchmarker does (`reservation-affinity=specific`
is documented for Autopilot and compute classes, not for Standard pools, so it is not selected). Flex-start is GKE's plain flex-start
node pool (`--flex-start`, no queued provisioning), as xpk does for TPUs since commit a3cfef70 ("FSQ only
for GPUs") and GKE's "Run a small batch workload with TPUs and flex-start" guide for single- and
multi-host slices: no ProvisioningRequest, so no admission check and no `gke-queued` label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CAPACITY_LABEL = "rljob.dev/capacity"  # on every TPU node pool, in every ResourceFlavor, selected by every TPU pod
# The cpu node pool eval jobs run on (docs/deploy-gke.md) carries CAPACITY_LABEL=cpu-eval and the matching NoSchedule
# taint; the `cpu-eval` ResourceFlavor names the same label. The same key as the TPU pools, not one of its own: Kueue
# compares a pod with a flavor only on label keys the flavor (v0.19.x) or its resource group (<= v0.17.5) names, and
# every TPU flavor names rljob.dev/capacity, so an eval pod selecting cpu-eval mismatches each TPU flavor and a TPU pod
# the eval flavor, under both rules. A key of its own would be cut away when the eval pod meets a TPU flavor, which
# would then take it (cpu and memory from a TPU flavor's quota, its TPU node labels merged into a pod that cannot run
# there). The pool is on-demand VMs: that is the kind an eval job is reported and priced as.
EVAL_POOL = "cpu-eval"
SPOT_LABEL = "cloud.google.com/gke-spot"
RESERVATION_NAME_LABEL = "cloud.google.com/reservation-name"

# Spot VMs get 30 s between the preemption notice and the stop: the trainer's SIGTERM checkpoint
# must fit, so a spot pod's grace period is capped at this.
SPOT_TERMINATION_GRACE_S = 30
# A flex-start VM runs at most 7 days; the trainer checkpoints before that (trainer side).
FLEX_START_MAX_RUN_S = 7 * 24 * 3600


@dataclass(frozen=True)
class CapacityScheduling:
    """What a trainer pod adds to select (and tolerate) its kinds of capacity.

    One kind: node selectors. Several: a required node affinity with one term per kind (terms are ORed, a
    term's expressions ANDed), because a reservation node must also carry its reservation's name and a spot
    node GKE's spot label, which a single `rljob.dev/capacity In [...]` cannot say. Kueue's flavor matching
    reads both (flavorassigner.go `flavorSelector`, v0.19.2: each term cut to the flavor's keys), and on
    admission adds the chosen flavor's labels as node selectors, which pins the pod to that one kind.
    """

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    affinity_terms: list[dict[str, Any]] = field(default_factory=list)  # nodeSelectorTerms, one per kind


def _taint_toleration(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def cpu_capacity_problem(capacities: tuple[str, ...]) -> str | None:
    """Why a cpu job cannot have `capacities` on GKE; None for on-demand alone.

    Refused rather than routed: only the TPU node pools carry rljob.dev/capacity (the guide creates no cpu pool of
    each kind), so a cpu pod selecting spot, flex-start or a reservation would match only TPU nodes, whose
    google.com/tpu taint it does not tolerate, and wait forever unqueued (cpu training jobs are never Kueue's; an eval
    job is, but only into the eval pool's flavor, which is on-demand VMs). A cpu job is
    the small end-to-end or smoke run; it does not need preemptible or reserved VMs. The local launcher keeps its
    own rules (service/adapters/local/capacity.py).
    """
    others = [c for c in capacities if c != "on-demand"]
    if not others:
        return None
    return (
        f"capacity {', '.join(others)} is a kind of TPU node pool on GKE (rljob.dev/capacity, docs/deploy-gke.md); a cpu "
        "job runs on any node with room and no pool of that kind exists for it, so it would never be scheduled: leave "
        "hardware.capacity out (on-demand), or ask for a TPU accelerator"
    )


def eval_pool_scheduling() -> CapacityScheduling:
    """What a queued eval pod adds: it selects the eval pool and tolerates the taint that keeps other pods off it."""
    return CapacityScheduling(
        {CAPACITY_LABEL: EVAL_POOL}, [{"key": CAPACITY_LABEL, "operator": "Equal", "value": EVAL_POOL, "effect": "NoSchedule"}]
    )


def _labels_of(capacity: str, reservation: str | None) -> dict[str, str]:
    """The node labels that say a node is of this kind (the operator's key, and GKE's own where it sets one)."""
    labels = {CAPACITY_LABEL: capacity}
    if capacity == "spot":
        labels[SPOT_LABEL] = "true"
    if capacity == "reservation":
        assert reservation is not None
        labels[RESERVATION_NAME_LABEL] = reservation
    return labels


def capacity_scheduling(capacities: tuple[str, ...], reservation: str | None = None, *, tpu: bool = True) -> CapacityScheduling:
    """The node selection and tolerations of `capacities` (HardwareSpec.capacities, in the spec's order).

    A TPU pod always selects its capacity, on-demand included: that is what keeps it out of the other
    flavors. A cpu pod selects nothing here (any node; a queued eval pod adds eval_pool_scheduling), and only on-demand.
    """
    unknown = [c for c in capacities if c not in ("on-demand", "spot", "flex-start", "reservation")]
    if unknown or not capacities:
        raise ValueError(f"unknown capacity {unknown or capacities!r}")
    if "reservation" in capacities and not reservation:
        raise ValueError("capacity reservation needs a reservation name")
    if not tpu:
        problem = cpu_capacity_problem(capacities)
        if problem:
            raise ValueError(problem)
        return CapacityScheduling()
    tolerations = [_taint_toleration(SPOT_LABEL)] if "spot" in capacities else []
    if len(capacities) == 1:
        return CapacityScheduling(_labels_of(capacities[0], reservation), tolerations)
    terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in _labels_of(c, reservation).items()]}
        for c in capacities
    ]
    return CapacityScheduling({}, tolerations, terms)
