"""What `hardware.capacity` means to the local launcher, which runs every job on this machine.

on-demand and spot run: a spot job accepts being preempted, and a machine that never preempts it gives
it more than it asked for. reservation and flex-start are refused at submit: each names capacity GKE
provisions (a reservation by name, a Dynamic Workload Scheduler VM that stops after 7 days), which this
machine is not, so running it here would silently drop what the spec asked for.
"""

from __future__ import annotations

from trainer.contract import JobSpec

RUNS_LOCALLY = frozenset({"on-demand", "spot"})


def local_capacity_problem(spec: JobSpec) -> str | None:
    capacity = spec.hardware.capacity
    if capacity in RUNS_LOCALLY:
        return None
    return (
        f"capacity {capacity} is GKE capacity, and the local launcher runs jobs on this machine; use capacity: "
        "on-demand here, or submit to a service with the Kubernetes launcher (RLJOB_LAUNCHER=kubernetes)"
    )
