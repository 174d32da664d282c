"""/v1/jobs: submit, list, read, metrics, samples, repro, logs, cancel. Routes translate HTTP to JobService calls."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Header, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from pydantic import StringConstraints

from service.api.deps import (
    CallerDep,
    JobIdPath,
    JobServiceDep,
    LogFollowersDep,
    MetricsDep,
    PublicDep,
    ReadyDep,
    SettingsDep,
    StoreDep,
    ViewsDep,
    VisibleJobDep,
    serving_of,
)
from service.api.errors import error_responses
from service.api.log_follow import Pacer, follow_log, log_chunks
from service.api.metrics import ServiceMetrics
from service.domain.job_repro import read_job_repro
from service.domain.records.errors import BadCursor, InvalidRequest
from service.domain.records.estimate_models import JobEstimate
from service.domain.records.models import JobCreate, JobFilters, JobPublic, JobRecord, JobsPublic, MetricsPublic, SamplesPublic
from service.domain.records.phases import JobPhase
from trainer.contract import ReproRecord

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
TEXT_PLAIN = "text/plain; charset=utf-8"
MAX_CURSOR_PK = 2**63 - 1
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+$"  # unpadded base64url; only cursors the service issued are accepted (else 400)
LabelFilter = Annotated[str, StringConstraints(pattern=r"^[^=]+=.*$", max_length=127)]
# A spec either backend accepts (a test submits it): generated clients and API docs start from it.
SUBMIT_EXAMPLES = {
    "cpu": {
        "summary": "SmolLM2-135M-Instruct on GSM8K, on CPU",
        "value": {
            "name": "smollm2-gsm8k",
            "model": {"source": "HuggingFaceTB/SmolLM2-135M-Instruct"},
            "dataset": {"name": "openai/gsm8k"},
            "grpo": {"num_batches": 20, "batch_size": 2},
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
            "output": "gs://my-bucket/rljob-runs",
            "labels": {"experiment": "baseline"},
        },
    }
}

IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", max_length=255, pattern=r"^[\x21-\x7e]+$", description="retries with the same key return the same job"),
]


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, _, pk = raw.partition(":")
        if version != "v1" or not pk.isdigit():
            raise ValueError(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError) as e:
        raise BadCursor() from e
    if len(pk) > 19 or int(pk) > MAX_CURSOR_PK:  # the database's key is a signed 64-bit integer
        raise InvalidRequest(("query", "cursor"), "cursor is out of range; start again without a cursor")
    return int(pk)


def _parse_labels(labels: list[str]) -> tuple[tuple[str, str], ...]:
    """key=value filters; LabelFilter's pattern has already refused anything else (422)."""
    return tuple((key, value) for key, _, value in (item.partition("=") for item in labels))


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobPublic,
    responses={
        200: {
            "model": JobPublic | JobEstimate,
            "description": "the job this Idempotency-Key already created (same spec); with dry_run=estimate, the estimate "
            "(JobEstimate) and nothing created",
        },
        **error_responses(
            401,
            409,
            413,
            422,
            503,
            reasons={
                409: "the Idempotency-Key was already used for a different spec",
                503: "the service is re-attaching to running jobs after a start (no submissions until then), "
                "or its database is unreachable; retry",
            },
        ),
    },
)
def submit_job(
    body: Annotated[JobCreate, Body(openapi_examples=SUBMIT_EXAMPLES)],
    caller: CallerDep,
    jobs: JobServiceDep,
    metrics: MetricsDep,
    public: PublicDep,
    _: ReadyDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    dry_run: Annotated[
        Literal["estimate"] | None,
        Query(
            description="estimate: check the spec exactly as a submit does (the same 422s) and answer 200 with what it would "
            "take (queue, wait, run, wall, chip-hours, cost, storage, each with its range); nothing is created"
        ),
    ] = None,
    override_budget: Annotated[
        bool,
        Query(
            description="admins: submit even when the job would take its team past its monthly budget (what is committed "
            "plus its estimate's upper bound); it then counts against later submissions and is still stopped, with a "
            "checkpoint, once the budget is spent; anyone else gets 422"
        ),
    ] = False,
) -> JobPublic | Response:
    """Submit a job spec. 201 with the new job; 200 with the existing one for a repeated Idempotency-Key; 200 with its
    estimate and nothing created for dry_run=estimate. A created job keeps the estimate made at its submit."""
    if body.team is not None and body.team != caller.team:
        raise InvalidRequest(("body", "team"), f"team is set from your API token ({caller.team}); omit it")
    if dry_run == "estimate":
        estimate = jobs.estimate(caller, body)
        return Response(estimate.model_dump_json(), media_type="application/json")
    return public(counted_submit(metrics, response, lambda: jobs.submit(caller, body, idempotency_key, override_budget=override_budget)))


def counted_submit(metrics: ServiceMetrics, response: Response, submit: Callable[[], tuple[JobRecord, bool]]) -> JobRecord:
    """A submit (a job's or an eval's), counted by its outcome; a replayed Idempotency-Key answers 200, not 201."""
    try:
        record, created = submit()
    except Exception:
        metrics.submissions.labels("error").inc()
        raise
    metrics.submissions.labels("created" if created else "replayed").inc()
    if not created:
        response.status_code = status.HTTP_200_OK
    return record


@router.get("", response_model=JobsPublic, responses=error_responses(400, 401, 422, 503))
def list_jobs(
    caller: CallerDep,
    views: ViewsDep,
    phase: JobPhase | None = None,
    team: Annotated[str | None, Query(max_length=63, description="admins only; others always see their own team")] = None,
    name: Annotated[str | None, Query(max_length=63)] = None,
    label: Annotated[list[LabelFilter], Query(max_length=20, description="key=value, repeatable (all must match)")] = [],  # noqa: B006 (FastAPI copies defaults)
    cursor: Annotated[str | None, Query(max_length=64, pattern=CURSOR_PATTERN, description="next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Response:
    """Jobs newest first, one page at a time; follow `next_cursor` for older ones."""
    filters = JobFilters(phase=phase, team=team, name=name, labels=_parse_labels(label))
    before = decode_cursor(cursor) if cursor else None
    data, count, last_pk = views.page_json(caller, filters, before_pk=before, limit=limit)
    # JobsPublic as pydantic writes it (compact, fields in order), around the jobs' own JSON.
    next_cursor = json.dumps(encode_cursor(last_pk) if last_pk is not None else None).encode()
    return Response(b'{"data":' + data + b',"count":%d,"next_cursor":' % count + next_cursor + b"}", media_type="application/json")


@router.get("/{job_id}", response_model=JobPublic, responses=error_responses(401, 404, 422, 503))
async def get_job(job_id: JobIdPath, caller: CallerDep, request: Request) -> Response:
    # async, and no thread hop when the job is in memory (api/job_views.py). The views come from the request, not
    # a dependency: FastAPI solves each dependency anew on every request, and this is the read a dashboard polls.
    return await serving_of(request).views.status(caller, job_id)


@router.get("/{job_id}/metrics", response_model=MetricsPublic, responses=error_responses(401, 404, 422, 503))
def get_metrics(record: VisibleJobDep, store: StoreDep, limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000) -> MetricsPublic:
    """The newest `limit` train steps' and evals' scalars, in the order the trainer reported them."""
    return MetricsPublic(job_id=record.id, points=store.metric_points(record.id, limit=limit))


@router.get(
    "/{job_id}/samples",
    response_model=SamplesPublic,
    responses=error_responses(
        401,
        404,
        409,
        422,
        503,
        reasons={
            404: "no such job visible to your team, no samples yet, none for that step, or unreadable",
            409: "the run directory's samples file (or directory) is a symlink, not a regular file, or too large: "
            "the job wrote it, and the service does not read it",
            503: "the run directory's storage could not be read, or the service is starting; retry",
        },
    ),
)
def get_samples(
    record: VisibleJobDep,
    jobs: JobServiceDep,
    step: Annotated[int | None, Query(ge=1, le=10**9, description="a train step; default the newest with samples")] = None,
) -> SamplesPublic:
    """Completions the policy wrote at a train step and what each reward function paid for them.

    `steps_available` lists the steps that have samples, so a client can offer the others."""
    return jobs.samples(record, step)


@router.get(
    "/{job_id}/repro",
    response_model=ReproRecord,
    responses=error_responses(
        401,
        404,
        409,
        422,
        503,
        reasons={
            404: "no such job visible to your team, or it has not written repro.json yet (the trainer writes it before its first stage)",
            409: "the run directory's repro.json is a symlink, not a regular file, or too large: the job wrote it, and the "
            "service does not read it",
            503: "the run directory's storage could not be read, or the service is starting; retry",
        },
    ),
)
def get_repro(record: VisibleJobDep, jobs: JobServiceDep) -> ReproRecord:
    """What produced the run: the resolved spec, image, package versions, seeds, content hashes of the data,
    model and reward file, and the hardware, as the trainer recorded them before training."""
    return read_job_repro(jobs.run_files, record)  # a read of the run directory, like the diff's


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    responses=error_responses(401, 404, 409, 422, 503, reasons={409: "the job has already ended: nothing to cancel"}),
)
def cancel_job(record: VisibleJobDep, caller: CallerDep, jobs: JobServiceDep, public: PublicDep) -> JobPublic:
    """Ask the job to stop: CANCELLING now, CANCELLED once the workload has really stopped."""
    return public(jobs.cancel(caller, record.id))


@router.get(
    "/{job_id}/logs",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "the log, one line per line"},
        **error_responses(
            401,
            404,
            422,
            429,
            503,
            reasons={
                429: "the service's limit of concurrent follow=true streams, or the team's share of it, is reached; retry, "
                "or read without follow",
            },
        ),
    },
)
async def get_logs(
    request: Request,
    record: VisibleJobDep,
    caller: CallerDep,
    jobs: JobServiceDep,
    store: StoreDep,
    followers: LogFollowersDep,
    settings: SettingsDep,
    follow: bool = False,
    tail_lines: Annotated[int | None, Query(ge=0, le=100_000)] = None,
) -> StreamingResponse:
    """The trainer's output; with follow=true the response streams until the job has stopped.

    After the workload is gone (a pod removed after its TTL), the stage logs kept in the job's run
    directory are served instead.
    """
    lines = jobs.logs(record, follow=follow, tail_lines=tail_lines)
    if follow:  # polled from the event loop, on the followers' own threads (api/log_follow.py)

        def is_terminal() -> bool:
            current = store.get(record.id)
            return current is None or current.phase.is_terminal()

        body = follow_log(
            lines,
            followers,
            caller.team,
            is_disconnected=request.is_disconnected,
            is_terminal=is_terminal,
            poll_interval_s=settings.log_follow_poll_interval_s,
            pacer=Pacer(settings.log_follow_max_bytes_per_s),
        )
        return StreamingResponse(body, media_type=TEXT_PLAIN)

    return StreamingResponse(log_chunks(lines), media_type=TEXT_PLAIN)  # finite: a step of the thread pool per 64 KiB
