"""/v1/jobs/diff: two jobs side by side (service/domain/run_diff.py compares them).

Its own router, included before /v1/jobs/{job_id}, which would otherwise take `diff` for a job id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import CallerDep, JobServiceDep, PublicDep, StoreDep, get_visible_job
from service.api.errors import error_responses
from service.domain.job_repro import repro_if_readable
from service.domain.run_diff import JobDiff, diff_jobs

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
MAX_DIFF_POINTS = 100_000  # each job's train steps read for final and best reward (the metrics route's own cap)
JobIdQuery = Annotated[str, Query(max_length=64, description="a job id (rl- and 12 lowercase letters or digits)")]


@router.get(
    "/diff",
    response_model=JobDiff,
    responses=error_responses(
        401,
        404,
        422,
        503,
        reasons={
            404: "either job is not visible to your team",
            503: "a run directory's storage could not be read, or the service is starting; retry",
        },
    ),
)
def get_job_diff(a: JobIdQuery, b: JobIdQuery, caller: CallerDep, jobs: JobServiceDep, public: PublicDep, store: StoreDep) -> JobDiff:
    """What differs between jobs a and b (spec keys; versions, image, seeds, data, model, reward file and hardware from
    their repro records) and how each turned out: final and best reward, eval before and after with 95% intervals,
    steps, wall time, chip-hours and cost."""
    first, second = get_visible_job(a, caller, jobs), get_visible_job(b, caller, jobs)
    return diff_jobs(
        public(first),
        public(second),
        points=(store.metric_points(first.id, limit=MAX_DIFF_POINTS), store.metric_points(second.id, limit=MAX_DIFF_POINTS)),
        records=(repro_if_readable(jobs.run_files, first), repro_if_readable(jobs.run_files, second)),
    )
