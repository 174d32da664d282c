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
- `warmup`: what each attempt's first train step cost beyond a steady step of that attempt (JAX compiling the
  step's programs, loading the models, first allocations), carved out of the parts above and out of `other`: the
  attempt's first report set against its newest gives a steady step's seconds by part, and the first step's excess
  over them moves here (never below zero). A steady step counted with the attempt's last report (train_rl's end
  included) is a little long, so the warmup is if anything low; an attempt with one report has none;
- `other`: what no part names (the trainer process starting, rewards, the run between stages, reports not yet in
  after a kill).
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
from trainer.contract.run.goodput import (
    CONVERT,
    EVAL,
    EXPORT,
    GOODPUT_PARTS,
    LOGPROBS,
    OTHER,
    PRODUCTIVE_PARTS,
    QUEUED,
    ROLLOUT,
    STARTUP,
    TRAIN_PARTS,
    UPDATE,
    WARMUP,
    WEIGHT_SYNC,
    JobGoodput,
    TrainGoodput,
)

from .job_clock import JobClock, job_clock

log = logging.getLogger(__name__)
_DIGITS = 3  # milliseconds
# The parts every step runs (checkpoint and eval come every so many steps, so a first step's save is no warmup).
EVERY_STEP_PARTS = (ROLLOUT, LOGPROBS, UPDATE, WEIGHT_SYNC)


def train_parts(by_attempt: dict[int, TrainGoodput]) -> dict[str, float]:
    """Seconds by train_rl part, summed over attempts."""
    totals = dict.fromkeys(TRAIN_PARTS, 0.0)
    for measured in by_attempt.values():
        for name, seconds in measured.parts.items():
            if name in totals:
                totals[name] += seconds
    return totals


def first_step_excess(first: TrainGoodput, last: TrainGoodput) -> dict[str, float]:
    """Seconds by part (OTHER: the time no part names, model loading included) that an attempt's first step took
    beyond a steady step, a steady step being the mean of the steps after it; empty with no step after it."""
    steps = last.step - first.step
    if steps <= 0:
        return {}

    def unnamed(report: TrainGoodput) -> float:
        return report.elapsed_s - sum(report.parts.values())

    seconds = {name: (first.parts.get(name, 0.0), last.parts.get(name, 0.0)) for name in EVERY_STEP_PARTS}
    seconds[OTHER] = (unnamed(first), unnamed(last))
    return {name: max(0.0, at_first - (at_last - at_first) / steps) for name, (at_first, at_last) in seconds.items()}


def split_warmup(goodput: dict[int, TrainGoodput], first_goodput: dict[int, TrainGoodput]) -> dict[str, float]:
    """train_parts with each attempt's first-step excess moved out of its parts into WARMUP (the excess over OTHER
    too, which the caller's remainder then lacks)."""
    parts = train_parts(goodput)
    parts[WARMUP] = 0.0
    for attempt, first in first_goodput.items():
        last = goodput.get(attempt)
        excess = first_step_excess(first, last) if last is not None else {}
        for name, seconds in excess.items():
            if name != OTHER:
                parts[name] -= seconds
            parts[WARMUP] += seconds
    return parts


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
        **split_warmup(record.report.goodput, record.report.first_goodput),
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
