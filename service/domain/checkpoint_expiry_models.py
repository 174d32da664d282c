"""A finished run's checkpoint retention: what the leader's pass planned to delete and has deleted. Owned by the
checkpoint lifecycle work of issue 37."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class CheckpointExpiry(BaseModel):
    planned_at: datetime = Field(description="when the pass decided which checkpoints expire")
    planned: list[str] = Field(description="the expiring checkpoints, as paths relative to the run directory")
    deleted: list[str] = Field(default_factory=list, description="those already deleted")
    finished_at: datetime | None = Field(default=None, description="when the last of them was deleted")
