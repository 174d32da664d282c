"""What `hardware.capacity` means to the local launcher, which runs every job on this machine.

on-demand and spot run: a spot job accepts being preempted, and a machine that never preempts it gives
it more than it asked for. reservation and flex-start are refused at submit: each names capacity GKE
provisions (a reservation by name, a Dynamic Workload Scheduler VM that stops after 7 days), which this
machine is not, so running it here would silently drop what the spec asked for. A list of kinds runs when
one of them runs here, as the first such kind (what status and usage then show).
"""

from __future__ import annotations

from trainer.contract import JobSpec
from trainer.contract.spec.hardware import capacity_text

RUNS_LOCALLY = ("on-demand", "spot")


def local_capacity(spec: JobSpec) -> str | None:
    """The kind of capacity the job runs as here: the first of its set this machine offers; None if none."""
    return next((c for c in spec.hardware.capacities if c in RUNS_LOCALLY), None)


def local_capacity_problem(spec: JobSpec) -> str | None:
    if local_capacity(spec) is not None:
        return None
    capacity = capacity_text(spec.hardware.capacities)
    return (
        f"capacity {capacity} is GKE capacity, and the local launcher runs jobs on this machine; use capacity: "
        "on-demand (or a list with on-demand or spot) here, or submit to a service with the Kubernetes launcher "
        "(RLJOB_LAUNCHER=kubernetes)"
    )
