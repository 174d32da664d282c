"""Where a job runs: the kind of capacity (and, with Kueue, the ResourceFlavor) its backend admitted it into.

A spec names a kind (`hardware.capacity: spot`) or an ordered set of kinds (`[spot, on-demand]`); with a set,
the pool chooses (Kueue tries its ClusterQueue's flavors in order), and a job preempted and requeued may come
back on another kind of its set. The launcher reports the kind it sees the workload admitted into
(Observation.capacity, .flavor); the job service keeps it here, and from then on the job's status, the labels
on its workload (`kubectl get jobs`), its price and its cost follow that kind. Billed seconds are kept per
kind as each billed phase closes, so a job that ran on spot and then on on-demand is charged each at its price.
"""

from __future__ import annotations

from service.domain.records.models import JobRecord, Placement
from service.domain.records.phases import JobPhase
from trainer.contract import JobSpec

# Charged: the workload holds its chips. QUEUED waits for capacity; LAUNCHING is admitted but not running.
# Defined here, where each closed billed phase is counted against its kind; usage.py reads it from here.
BILLED_PHASES: frozenset[JobPhase] = frozenset({JobPhase.RUNNING, JobPhase.CANCELLING})


def placement_changed(rec: JobRecord, capacity: str | None, flavor: str | None) -> bool:
    """Whether an observation names a kind or flavor other than the one kept (None: it names none)."""
    if capacity is None:
        return False
    kept = rec.placement
    return kept is None or kept.capacity != capacity or (flavor is not None and kept.flavor != flavor)


def place(rec: JobRecord, capacity: str, flavor: str | None) -> Placement:
    """The record's placement after an admission into `capacity` (`flavor`); billed time so far is kept."""
    billed = dict(rec.placement.billed_s) if rec.placement else {}
    stranded = list(rec.placement.stranded) if rec.placement else []
    rec.placement = Placement(capacity=capacity, flavor=flavor, billed_s=billed, stranded=stranded)
    return rec.placement


def kinds_left(rec: JobRecord, leaving: str | None = None) -> tuple[str, ...]:
    """The kinds of the job's hardware.capacity it was not stranded on (nor is leaving now), in the spec's order."""
    gone = {*(rec.placement.stranded if rec.placement else ()), *((leaving,) if leaving else ())}
    return tuple(c for c in rec.hardware.capacities if c not in gone)


def launch_spec(rec: JobRecord) -> JobSpec:
    """The spec a launch renders: the stored one, less the kinds of capacity the job was stranded on (never all)."""
    left = kinds_left(rec)
    if not left or left == rec.hardware.capacities:
        return rec.spec
    hardware = rec.spec.hardware.model_copy(
        update={"capacity": list(left), "reservation": rec.spec.hardware.reservation if "reservation" in left else None}
    )
    return rec.spec.model_copy(update={"hardware": hardware})


def close_billed_phase(rec: JobRecord, left: JobPhase, spent_s: float) -> None:
    """Count a closed phase's seconds against the kind the job ran on (only billed phases, only once placed)."""
    if left in BILLED_PHASES and rec.placement is not None and spent_s > 0:
        kind = rec.placement.capacity
        rec.placement.billed_s[kind] = round(rec.placement.billed_s.get(kind, 0.0) + spent_s, 3)


def billed_by_capacity(rec: JobRecord, billed_total_s: float) -> dict[str, float]:
    """The job's billed seconds by kind: each kind's closed time; the open billed phase on the current kind;
    what no placement covers (billed before the first admission was seen, or stored before placements were)
    on the current kind, else the spec's first kind."""
    kept = dict(rec.placement.billed_s) if rec.placement else {}
    current = rec.placement.capacity if rec.placement else rec.hardware.capacities[0]
    rest = max(0.0, billed_total_s - sum(kept.values()))
    if rest > 0:
        kept[current] = kept.get(current, 0.0) + rest
    return kept
