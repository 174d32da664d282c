"""Where a job's wall-clock time went (RL goodput): pure functions of a record and a time.

The wall time is the job's life so far: the seconds of every phase it has been in (usage.phase_seconds,
the same clock as chip-hours), so it stops when the job ends. It is split into:
- `queued` (QUEUED) and `startup` (LAUNCHING: admitted or handed to the backend, the trainer not yet
  running), from the phase times;
- `convert` and `export`, the trainer's stage durations (StageFinished; a stage under way counts up to now); an
  eval job's `evaluate` stage counts as `eval`;
- inside train_rl, rollout, logprobs, update, weight_sync, checkpoint and eval, from the trainer's newest
  `goodput` event of each attempt (cumulative within an attempt, so attempts add up: a killed attempt's
  last report stays);
- `other`: what no part names (the trainer process starting, model loading and compilation in train,
  rewards, the run between stages, reports not yet in after a kill).
Measured parts never overlap (each comes from a disjoint clock: phases outside RUNNING, stages inside
it, and train_rl's parts inside the train stage, attributed instant by instant), so `other` is the
wall time minus their sum and is never negative; a negative one is a bug, logged, not hidden.
`productive_fraction` = (rollout + update) / wall.
"""

from __future__ import annotations

import logging
from datetime import datetime

from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from trainer.contract import Stage
from trainer.contract.goodput import (
    CONVERT,
    EVAL,
    EXPORT,
    GOODPUT_PARTS,
    OTHER,
    PRODUCTIVE_PARTS,
    QUEUED,
    STARTUP,
    TRAIN_PARTS,
    JobGoodput,
    TrainGoodput,
)

from .job_clock import JobClock, job_clock

log = logging.getLogger(__name__)
_DIGITS = 3  # milliseconds


def train_parts(by_attempt: dict[int, TrainGoodput]) -> dict[str, float]:
    """Seconds by train_rl part, summed over attempts."""
    totals = dict.fromkeys(TRAIN_PARTS, 0.0)
    for measured in by_attempt.values():
        for name, seconds in measured.parts.items():
            if name in totals:
                totals[name] += seconds
    return totals


def goodput_parts(record: JobRecord, now: datetime) -> tuple[float, dict[str, float]]:
    """(wall seconds, seconds by part); `other` is the unclamped remainder (tests assert it is >= 0)."""
    return clock_parts(record, job_clock(record, now))


def clock_parts(record: JobRecord, clock: JobClock) -> tuple[float, dict[str, float]]:
    """goodput_parts from a clock already read."""
    by_phase, by_stage = clock.phases, clock.stages
    wall = sum(by_phase.values())
    parts = {
        QUEUED: by_phase[JobPhase.QUEUED.value],
        STARTUP: by_phase[JobPhase.LAUNCHING.value],
        CONVERT: by_stage.get(Stage.CONVERT.value, 0.0),  # an eval job has no convert stage (job_clock.stage_seconds)
        **train_parts(record.report.goodput),
        EXPORT: by_stage[Stage.EXPORT.value],
    }
    parts[EVAL] += by_stage.get(Stage.EVALUATE.value, 0.0)  # an eval job's evaluate stage is all evaluation
    parts[OTHER] = wall - sum(parts.values())
    return wall, parts


def warn_if_parts_overlap(record: JobRecord, now: datetime) -> None:
    """Logged where a measurement arrives (progress.py), once per report rather than on every read."""
    _, parts = goodput_parts(record, now)
    if parts[OTHER] < -0.5:  # beyond clock rounding: two measured parts overlap somewhere
        log.warning("job %s: measured goodput parts exceed its wall time by %.1f s: %s", record.id, -parts[OTHER], parts)


def job_goodput(record: JobRecord, now: datetime) -> JobGoodput | None:
    """None before the job has spent any time (a record without phase times)."""
    return goodput_of(record, job_clock(record, now))


def goodput_of(record: JobRecord, clock: JobClock) -> JobGoodput | None:
    """job_goodput from a clock already read."""
    wall, parts = clock_parts(record, clock)
    if wall <= 0 and not record.report.goodput:
        return None
    parts[OTHER] = max(0.0, parts[OTHER])
    productive = sum(parts[name] for name in PRODUCTIVE_PARTS)
    return JobGoodput(
        wall_s=round(wall, _DIGITS),
        parts={name: round(parts[name], _DIGITS) for name in GOODPUT_PARTS},
        productive_fraction=round(productive / wall, 4) if wall > 0 else None,
    )
