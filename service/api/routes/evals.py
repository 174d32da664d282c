"""/v1/evals: submit an eval job, list and read evals, compare two. Routes translate HTTP to domain calls.

An eval job is a job: it is cancelled, logged and read in full through /v1/jobs (its JobPublic has `evaluation`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Body, Query, Response, status

from service.api.deps import CallerDep, JobIdPath, JobServiceDep, MetricsDep, PublicDep, ReadyDep, SettingsDep, get_visible_job
from service.api.errors import error_responses
from service.api.routes.jobs import CURSOR_PATTERN, IdempotencyKey, counted_submit, decode_cursor, encode_cursor
from service.domain.evals.eval_compare import compare_evals
from service.domain.evals.eval_jobs import EvalCreate, build_eval_spec
from service.domain.evals.eval_view import EvalFilters, eval_public, scan_evals
from service.domain.job_service import JobService
from service.domain.records.errors import EvalsNotComparable, InvalidRequest, JobNotFound, RunFileRefused, RunFilesUnavailable
from service.domain.records.eval_models import EvalComparisonPublic, EvalPublic, EvalsPublic
from service.domain.records.models import Caller, JobFilters, JobPublic, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.usage_models import JobUsage

router = APIRouter(prefix="/v1/evals", tags=["evals"])
FunctionQuery = Annotated[str | None, Query(max_length=128, description="the reward function to compare on; default a's primary")]
# Under the service's state directory: where an eval of a checkpoint location goes on the embedded default (local launcher).
EVAL_RUNS_DIR = "eval-runs"
SUBMIT_EXAMPLES = {
    "export": {
        "summary": "a training job's export on the built-in arith suite, against an earlier eval",
        "value": {"checkpoint": "rl-abcdefghijkl:export", "suite": {"name": "arith"}, "baseline": "rl-mnopqrstuvwx"},
    }
}
NOT_COMPARABLE = (
    "not both SUCCEEDED eval jobs with reports, different suites or suite versions, rows that do not pair, or an outcomes "
    "file the service does not read (a symlink, not a regular file, too large, or not the trainer's)"
)


def _eval_record(job_id: str, caller: Caller, jobs: JobService) -> JobRecord:
    record = get_visible_job(job_id, caller, jobs)
    if not record.spec.is_eval:
        raise JobNotFound(job_id)  # a training job is no eval: /v1/jobs shows it
    return record


def _usage(public: Callable[[JobRecord], JobPublic]) -> Callable[[JobRecord], JobUsage]:
    return lambda record: public(record).usage


def _training_job(record: JobRecord, caller: Caller, jobs: JobService) -> JobRecord | None:
    checkpoint = record.spec.evaluation.checkpoint if record.spec.evaluation else None
    if checkpoint is None or checkpoint.job_id is None:
        return None
    try:
        return jobs.get(caller, checkpoint.job_id)
    except JobNotFound:
        return None


def _compare(a: JobRecord, b: JobRecord, function: str | None, caller: Caller, jobs: JobService, public: PublicDep) -> EvalComparisonPublic:
    return compare_evals(jobs.run_files, a, b, function, usage_of=_usage(public), training=_training_job(a, caller, jobs))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=EvalPublic,
    responses={
        200: {"model": EvalPublic, "description": "the eval this Idempotency-Key already created (same spec)"},
        **error_responses(
            401,
            409,
            413,
            422,
            503,
            reasons={
                409: "the Idempotency-Key was already used for a different eval",
                422: "a field is invalid: a checkpoint that names no checkpoint (and why), a suite that is not one, a baseline "
                "that is not an eval on the same suite; every problem is listed",
            },
        ),
    },
)
def submit_eval(
    body: Annotated[EvalCreate, Body(openapi_examples=SUBMIT_EXAMPLES)],
    caller: CallerDep,
    jobs: JobServiceDep,
    metrics: MetricsDep,
    public: PublicDep,
    settings: SettingsDep,
    _: ReadyDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> EvalPublic:
    """Evaluate a checkpoint on a suite in an eval job of its own (a cpu job: queued, launched, logged and cancelled as
    any job). 201 with the new eval; 200 with the existing one for a repeated Idempotency-Key."""
    local = settings.launcher == "local"
    default_output = str(Path(settings.state_dir).expanduser().resolve() / EVAL_RUNS_DIR) if local else None

    def submit() -> tuple[JobRecord, bool]:
        spec = build_eval_spec(body, lambda job_id: jobs.get(caller, job_id), jobs.run_files, default_output)
        return jobs.submit(caller, spec, idempotency_key)

    record = counted_submit(metrics, response, submit)
    return eval_public(record, public(record).usage)


@router.get("", response_model=EvalsPublic, responses=error_responses(400, 401, 422, 503))
def list_evals(
    caller: CallerDep,
    jobs: JobServiceDep,
    public: PublicDep,
    phase: JobPhase | None = None,
    suite: Annotated[str | None, Query(max_length=63, description="the suite's name")] = None,
    job_of: Annotated[str | None, Query(max_length=64, description="evals of this training job's checkpoints")] = None,
    cursor: Annotated[str | None, Query(max_length=64, pattern=CURSOR_PATTERN, description="next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> EvalsPublic:
    """Your team's eval jobs, newest first. A page may hold fewer than `limit` when many jobs are not evals; follow
    `next_cursor` until it is null."""
    filters = JobFilters(phase=phase)

    def page(before_pk: int | None, n: int) -> tuple[list[tuple[int, JobRecord]], bool]:
        return jobs.list_jobs(caller, filters, before_pk=before_pk, limit=n)

    before = decode_cursor(cursor) if cursor else None
    records, last_pk = scan_evals(page, EvalFilters(suite=suite, job_of=job_of), before_pk=before, limit=limit)
    data = [eval_public(record, public(record).usage) for record in records]
    return EvalsPublic(data=data, count=len(data), next_cursor=encode_cursor(last_pk) if last_pk is not None else None)


@router.get(
    "/{job_id}",
    response_model=EvalPublic,
    responses=error_responses(401, 404, 422, 503, reasons={404: "no eval job of that id visible to your team"}),
)
def get_eval(job_id: JobIdPath, caller: CallerDep, jobs: JobServiceDep, public: PublicDep) -> EvalPublic:
    """The eval: phase, checkpoint, suite (name, version, content hash), scores per reward function with 95% CIs, usage;
    with a baseline, the comparison once both have SUCCEEDED (`comparison_note` says why there is none yet)."""
    record = _eval_record(job_id, caller, jobs)
    found = eval_public(record, public(record).usage)
    baseline = found.eval_job.baseline
    if baseline is None:
        return found
    try:
        other = jobs.get(caller, baseline)
        if record.phase is not JobPhase.SUCCEEDED or other.phase is not JobPhase.SUCCEEDED:
            found.comparison_note = (
                f"compared with {baseline} once both have SUCCEEDED ({record.id} is {record.phase.value}, {baseline} {other.phase.value})"
            )
        else:
            found.comparison = _compare(record, other, None, caller, jobs, public)
    except (JobNotFound, EvalsNotComparable, RunFileRefused, RunFilesUnavailable) as e:
        found.comparison_note = str(e)
    return found


@router.get(
    "/{job_id}/compare",
    response_model=EvalComparisonPublic,
    responses=error_responses(
        401,
        404,
        409,
        422,
        503,
        reasons={
            404: "either eval is not visible to your team",
            409: NOT_COMPARABLE,
            422: "no baseline given, and the eval was submitted without one",
            503: "a run directory's storage could not be read, or the service is starting; retry",
        },
    ),
)
def compare(
    job_id: JobIdPath,
    caller: CallerDep,
    jobs: JobServiceDep,
    public: PublicDep,
    baseline: Annotated[
        str | None, Query(max_length=64, description="the eval to compare with; default the one it was submitted with")
    ] = None,
    function: FunctionQuery = None,
) -> EvalComparisonPublic:
    """This eval minus the baseline, paired by row: each score's difference with its paired bootstrap 95% CI and, for
    pass@1, pass@k and maj@k, the exact McNemar p; each eval's chip-hours and cost; and, when this eval evaluated a
    training job's trained weights, that job's cost per point gained."""
    record = _eval_record(job_id, caller, jobs)
    other_id = baseline or (record.spec.evaluation.baseline if record.spec.evaluation else None)
    if other_id is None:
        raise InvalidRequest(("query", "baseline"), f"{job_id} was submitted without a baseline: name the eval to compare with")
    return _compare(record, _eval_record(other_id, caller, jobs), function, caller, jobs, public)
