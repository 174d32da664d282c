"""What a job is expected to take, estimated before it is created (POST /v1/jobs?dry_run=estimate, and stored on
the job at submit so its view shows the estimate beside the actuals). Owned by the estimate work of issue 37."""

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
        description="history: finished jobs of the same model shape, step count and hardware; formula: none, so tokens per step"
    )
    basis_detail: str = Field(description="which jobs or which formula, in words")
