"""How an eval job is shown: JobPublic.eval_job (GET /v1/jobs/{id}) and EvalPublic (GET /v1/evals/{id}).

Built from the record alone (its spec's `evaluation`, the trainer's report and the suite version the service gave
it: suite_versions.py), so showing an eval job reads nothing but the job; the comparison with a baseline, which
reads both outcomes files, is only on GET /v1/evals/{id} (routes/evals.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.domain.records.eval_models import EvalPublic, EvalSummaryPublic
from service.domain.records.models import JobRecord
from service.domain.records.usage_models import JobUsage
from trainer.contract.spec.eval_suite import generation_engine

from .suite_versions import suite_public


def eval_summary(record: JobRecord) -> EvalSummaryPublic | None:
    """The eval job's evaluation; None for a training job."""
    task = record.spec.evaluation
    if task is None:
        return None
    report = record.report.eval_report
    return EvalSummaryPublic(
        checkpoint=task.checkpoint,
        model_source=report.model_source if report else record.spec.model.source,
        suite=suite_public(record),
        baseline=task.baseline,
        n=report.n if report else None,
        k=report.k if report else None,
        primary=report.primary if report else None,
        scores=dict(report.functions) if report else {},
        generate_s=report.generate_s if report else None,
        engine=report.engine if report else generation_engine(record.spec.hardware.accelerator),
    )


def eval_public(record: JobRecord, usage: JobUsage) -> EvalPublic:
    summary = eval_summary(record)
    if summary is None:
        raise ValueError(f"{record.id} is not an eval job")
    return EvalPublic(
        id=record.id,
        name=record.name,
        team=record.team,
        phase=record.phase,
        message=record.message,
        created_at=record.created_at,
        finished_at=record.finished_at,
        eval_job=summary,
        usage=usage,
    )


# GET /v1/evals scans the caller's jobs newest first and keeps the eval jobs that match: at most this many jobs are
# read per request, so a team with many training jobs gets a short page and a cursor to go on, never a long scan.
MAX_SCANNED = 1000
SCAN_PAGE = 200


@dataclass(frozen=True)
class EvalFilters:
    suite: str | None = None  # the suite's name
    job_of: str | None = None  # the training job whose checkpoint was evaluated


def matches(record: JobRecord, filters: EvalFilters) -> bool:
    task = record.spec.evaluation
    if task is None:
        return False
    if filters.suite is not None and task.suite.name != filters.suite:
        return False
    return filters.job_of is None or task.checkpoint.job_id == filters.job_of


def scan_evals(
    page: Callable[[int | None, int], tuple[list[tuple[int, JobRecord]], bool]],
    filters: EvalFilters,
    *,
    before_pk: int | None,
    limit: int,
) -> tuple[list[JobRecord], int | None]:
    """Up to `limit` matching eval jobs, newest first, from `page(before_pk, n)` (the caller's visible jobs, as
    JobService.list_jobs pages them); and the pk to continue below (None: nothing older)."""
    found: list[JobRecord] = []
    scanned = 0
    cursor = before_pk
    while scanned < MAX_SCANNED:
        rows, more = page(cursor, min(SCAN_PAGE, MAX_SCANNED - scanned))
        for pk, record in rows:
            scanned += 1
            cursor = pk
            if matches(record, filters):
                found.append(record)
                if len(found) == limit:
                    return found, (pk if more or pk != rows[-1][0] else None)
        if not more:
            return found, None
    return found, cursor
