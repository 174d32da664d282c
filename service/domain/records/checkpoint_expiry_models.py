"""A finished run's checkpoint retention: what the leader's pass planned to delete and has deleted. Owned by the
checkpoint lifecycle work of issue 37 (checkpoint_retention.py decides, checkpoint_expiry.py carries it out).

The plan is written before anything is deleted, each checkpoint's size measured then: a pass killed midway (or a
leader that lost its lead) leaves the plan, and the next pass deletes what is not marked deleted yet, the leftovers
of a half-deleted checkpoint included, and counts the bytes the plan measured.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class ExpiringCheckpoint(BaseModel):
    step: int = Field(ge=0, description="the actor train step")
    path: str = Field(description="relative to the run directory: rl/<job-id>/checkpoints/actor/<step>")
    size_bytes: int = Field(ge=0, description="bytes of its files when the plan was made: what deleting it frees")
    files: int = Field(ge=0, description="its files (objects on gs://) when the plan was made")
    deleted_at: datetime | None = Field(default=None, description="when its last file was deleted; null: not yet")
    left: int = Field(
        default=0, ge=0, description="entries left in place because they are neither files, links nor directories (FIFOs, sockets)"
    )


class KeptCheckpoint(BaseModel):
    step: int = Field(ge=0)
    why: str = Field(description="final | exported | in use by <eval job>")


class CheckpointExpiry(BaseModel):
    days: int = Field(ge=0, description="the retention the plan applied: intermediate checkpoints are kept this many days after the end")
    planned_at: datetime = Field(description="when the pass decided which checkpoints expire")
    planned: list[ExpiringCheckpoint] = Field(description="the expiring intermediate actor checkpoints, oldest step first")
    kept: list[KeptCheckpoint] = Field(
        default_factory=list,
        description="actor checkpoints kept and why (the best checkpoints, the export and the converted checkpoint are never planned)",
    )
    finished_at: datetime | None = Field(default=None, description="when the last planned checkpoint was deleted")
    refused: str | None = Field(
        default=None, description="why nothing was deleted: the run directory is outside the team's locations, or not a plain directory"
    )

    @property
    def deleted(self) -> list[ExpiringCheckpoint]:
        return [c for c in self.planned if c.deleted_at is not None]

    @property
    def freed_bytes(self) -> int:
        return sum(c.size_bytes for c in self.deleted)

    @property
    def settled(self) -> bool:
        """Nothing is left to do: every planned checkpoint is deleted, or the deletion was refused."""
        return self.finished_at is not None or self.refused is not None
