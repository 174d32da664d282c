"""An ended job's actuals beside the estimate made at its submit (JobPublic.estimate_actuals): each figure
measured on the same clock the estimate predicts (job_clock.py), and whether it fell inside the estimate's range."""

from __future__ import annotations

from service.domain.records.estimate_models import ActualFigure, EstimateActuals, EstimateRange
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase

from .estimate_history import RUN_PHASES
from .job_clock import JobClock, job_clock
from .usage import PriceTable, chips_of, usage_of

STORAGE_FACTOR = 2.0  # the storage estimate is one figure: an actual within / 2 to x 2 of it is inside


def _figure(actual: float | None, estimate: EstimateRange | None) -> ActualFigure:
    if actual is None or estimate is None:
        return ActualFigure(actual=actual, expected=estimate.expected if estimate else None, within=None)
    # Rounded as the estimate is (to the millisecond or the millionth), so an actual on the bound is inside.
    inside = estimate.low - 1e-6 <= actual <= estimate.high + 1e-6
    return ActualFigure(actual=actual, expected=estimate.expected, within=inside)


def estimate_actuals(record: JobRecord, prices: PriceTable, clock: JobClock | None = None) -> EstimateActuals | None:
    """None until the job has ended, and for a job stored without an estimate. `clock`: the job's clock read at
    any time (an ended job's clock stops at its end, so any reading is the reading at its end); read here if None."""
    estimate = record.estimate
    if estimate is None or not record.phase.is_terminal() or record.finished_at is None:
        return None
    if clock is None:
        clock = job_clock(record, record.finished_at)
    wait = clock.phases[JobPhase.QUEUED.value]
    run = sum(clock.phases[p.value] for p in RUN_PHASES)  # estimate_history.run_seconds, from this clock
    chip_hours = chips_of(record.hardware.accelerator) * run / 3600
    cost = usage_of(record, clock, prices).cost_usd
    storage = record.report.storage.total_bytes if record.report.storage else None
    storage_range = None
    if estimate.storage_bytes is not None:
        storage_range = EstimateRange(
            expected=estimate.storage_bytes, low=estimate.storage_bytes / STORAGE_FACTOR, high=estimate.storage_bytes * STORAGE_FACTOR
        )
    return EstimateActuals(
        wait_s=_figure(round(wait, 3), estimate.wait_s),
        run_s=_figure(round(run, 3), estimate.run_s),
        wall_s=_figure(round(wait + run, 3), estimate.wall_s),
        chip_hours=_figure(round(chip_hours, 6), estimate.chip_hours),
        cost_usd=_figure(cost, estimate.cost_usd),
        storage_bytes=_figure(None if storage is None else float(storage), storage_range),
    )
