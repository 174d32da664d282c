"""How a job's `hardware.capacity` reaches GKE: the node labels and taints GKE puts on each kind of
TPU capacity, which a trainer pod selects and tolerates (and which the Kueue ResourceFlavors in
k8s/kueue/ name, so Kueue puts each job in the flavor of its capacity).

Sources (GKE documentation, 2026): Spot VMs label their nodes `cloud.google.com/gke-spot=true` and
node pools created with `--spot` may carry the matching NoSchedule taint; flex-start with queued
provisioning (Dynamic Workload Scheduler, `--flex-start --enable-queued-provisioning`) labels and
taints its nodes `cloud.google.com/gke-queued=true`; a specific reservation is selected with
`cloud.google.com/reservation-name` and `cloud.google.com/reservation-affinity=specific`.
On-demand capacity has no label of its own: it is what a pod gets without these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SPOT_LABEL = "cloud.google.com/gke-spot"
QUEUED_PROVISIONING_LABEL = "cloud.google.com/gke-queued"
RESERVATION_NAME_LABEL = "cloud.google.com/reservation-name"
RESERVATION_AFFINITY_LABEL = "cloud.google.com/reservation-affinity"

# Spot VMs get 30 s between the preemption notice and the stop: the trainer's SIGTERM checkpoint
# must fit, so a spot pod's grace period is capped at this.
SPOT_TERMINATION_GRACE_S = 30
# A flex-start VM runs at most 7 days; the trainer checkpoints before that (trainer side).
FLEX_START_MAX_RUN_S = 7 * 24 * 3600


@dataclass(frozen=True)
class CapacityScheduling:
    """What a trainer pod adds to select (and tolerate) one kind of capacity."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)


def _taint_toleration(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def capacity_scheduling(capacity: str, reservation: str | None = None) -> CapacityScheduling:
    """The node selector and tolerations of `capacity` (a HardwareSpec.capacity value)."""
    if capacity == "on-demand":
        return CapacityScheduling()
    if capacity == "spot":
        return CapacityScheduling({SPOT_LABEL: "true"}, [_taint_toleration(SPOT_LABEL)])
    if capacity == "flex-start":
        return CapacityScheduling({QUEUED_PROVISIONING_LABEL: "true"}, [_taint_toleration(QUEUED_PROVISIONING_LABEL)])
    if capacity == "reservation":
        if not reservation:
            raise ValueError("capacity reservation needs a reservation name")
        return CapacityScheduling({RESERVATION_NAME_LABEL: reservation, RESERVATION_AFFINITY_LABEL: "specific"})
    raise ValueError(f"unknown capacity {capacity!r}")
