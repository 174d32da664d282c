"""How long a job has spent in each phase and trainer stage: the one clock usage (chip-hours) and goodput
(where the time went) are both read from, so the two always add up to the same wall time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from trainer.contract import EVAL_STAGE_ORDER, STAGE_ORDER

# The phases a job can spend time in (terminal phases are never left, so they hold no time).
USAGE_PHASES: tuple[JobPhase, ...] = (JobPhase.QUEUED, JobPhase.LAUNCHING, JobPhase.RUNNING, JobPhase.CANCELLING)


def usage_as_of(record: JobRecord, now: datetime) -> datetime:
    """Usage stops counting when the job ends."""
    if record.phase.is_terminal() and record.finished_at is not None:
        return record.finished_at
    return now


def phase_seconds(record: JobRecord, now: datetime) -> dict[str, float]:
    """Seconds in each usage phase, the current one up to `now` while the job has not ended."""
    seconds = {phase.value: float(record.phase_seconds.get(phase.value, 0.0)) for phase in USAGE_PHASES}
    if not record.phase.is_terminal() and record.phase_entered_at is not None:
        seconds[record.phase.value] += max(0.0, (now - record.phase_entered_at).total_seconds())
    return seconds


def stage_seconds(record: JobRecord, now: datetime) -> dict[str, float]:
    """Seconds in each trainer stage; a stage under way counts up to now (or to the job's end)."""
    end = usage_as_of(record, now)
    seconds: dict[str, float] = {}
    # A job's own stages: an eval job's are export and evaluate, a training job's convert, train and export.
    for stage in EVAL_STAGE_ORDER if record.spec.is_eval else STAGE_ORDER:
        times = record.report.stage_times.get(stage)
        if times is None or times.skipped:
            seconds[stage.value] = 0.0
        elif times.duration_s is not None:
            seconds[stage.value] = times.duration_s
        elif times.started_at is not None:
            seconds[stage.value] = max(0.0, ((times.finished_at or end) - times.started_at).total_seconds())
        else:
            seconds[stage.value] = 0.0
    return seconds


@dataclass(frozen=True)
class JobClock:
    """A job's clock read once, at one `now`: what usage, goodput and the estimate's actuals are all computed
    from, so a view reads it once (views.py) and hands it to each."""

    as_of: datetime  # usage_as_of
    phases: dict[str, float]  # phase_seconds
    stages: dict[str, float]  # stage_seconds


def job_clock(record: JobRecord, now: datetime) -> JobClock:
    return JobClock(as_of=usage_as_of(record, now), phases=phase_seconds(record, now), stages=stage_seconds(record, now))
