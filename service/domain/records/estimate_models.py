"""What a job is expected to take, estimated before it is created (POST /v1/jobs?dry_run=estimate, and stored on
the job at submit so its view shows the estimate beside the actuals).

The fields here are what other parts read (the budget check reads chip_hours and cost_usd); the estimate's own
work may add fields, never rename these."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class EstimateRange(BaseModel):
    """A figure and the range it is expected in."""

    expected: float = Field(description="the central estimate")
    low: float = Field(description="the low end of the range")
    high: float = Field(description="the high end of the range")


class JobEstimate(BaseModel):
    made_at: datetime = Field(description="when the estimate was made")
    basis: Literal["history", "formula"] = Field(
        description="history: finished jobs of the same model shape, step count and hardware; formula: there were none, so "
        "tokens per step at an assumed rate"
    )
    basis_detail: str = Field(description="which jobs or which formula, in words")
    history_job_ids: list[str] = Field(default_factory=list, description="the finished jobs the run time comes from")
    queue_position: int | None = Field(
        default=None,
        description="where a job submitted now would stand: 0 = admitted at once, 1 = next to be admitted; null: the backend does not say",
    )
    wait_s: EstimateRange | None = Field(default=None, description="seconds queued before admission; null: no recent admissions")
    run_s: EstimateRange = Field(description="seconds from admission to the end")
    run_parts_s: dict[str, float] = Field(default_factory=dict, description="the expected run time split like goodput, by part")
    wall_s: EstimateRange = Field(description="seconds from submit to the end: wait and run")
    chip_hours: EstimateRange = Field(description="billed chip-hours (0 for a cpu job)")
    cost_usd: EstimateRange | None = Field(description="dollars at list price; null when the price table has no price")
    storage_bytes: int | None = Field(default=None, description="bytes the run directory will hold; null when unknown")
    wait_detail: str = Field(default="", description="where the wait and the place in line come from, in words")
    storage_detail: str = Field(default="", description="where the storage figure comes from, in words")


class ActualFigure(BaseModel):
    """One figure of an ended job beside its estimate."""

    actual: float | None = Field(description="what the job took; null when it was not measured")
    expected: float | None = Field(default=None, description="the estimate's central figure; null when it had none")
    within: bool | None = Field(description="whether the actual lies inside the estimate's range; null when either is missing")


class EstimateActuals(BaseModel):
    """An ended job's actuals beside the estimate made at its submit (JobPublic.estimate_actuals)."""

    wait_s: ActualFigure = Field(description="seconds queued (QUEUED), against the estimate's wait_s")
    run_s: ActualFigure = Field(description="seconds from admission to the end (LAUNCHING, RUNNING, CANCELLING)")
    wall_s: ActualFigure = Field(description="seconds from submit to the end")
    chip_hours: ActualFigure = Field(description="chips x run hours, as the estimate counts them")
    cost_usd: ActualFigure = Field(description="the job's usage cost at list price (billed time only)")
    storage_bytes: ActualFigure = Field(description="the run directory's newest measured size; within: inside [storage/2, storage x 2]")
