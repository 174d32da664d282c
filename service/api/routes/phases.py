"""GET /v1/phases: the job phases and which are terminal or cancellable, from service/domain/records/phases.py,
so clients (the dashboard) ask the service instead of keeping their own copy. Unauthenticated: it
reveals no job data, and is the same for every team."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from service.domain.records.phases import CANCELLABLE, TERMINAL, JobPhase

router = APIRouter(tags=["phases"])


class PhasesPublic(BaseModel):
    phases: list[JobPhase] = Field(description="every phase, in lifecycle order")
    terminal: list[JobPhase] = Field(description="a job in one of these never changes again")
    cancellable: list[JobPhase] = Field(description="a cancel request starts work in these")


@router.get("/v1/phases", response_model=PhasesPublic)
def phases() -> PhasesPublic:
    """The phase facts a client needs to know when a job is finished and when it can be cancelled."""
    ordered = list(JobPhase)
    return PhasesPublic(
        phases=ordered,
        terminal=[p for p in ordered if p in TERMINAL],
        cancellable=[p for p in ordered if p in CANCELLABLE],
    )
