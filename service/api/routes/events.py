"""Server-Sent Events: a job's changes (/v1/jobs/{id}/events) and all of a team's (/v1/events).

Every SSE `id` is the event-log seq, so a client that reconnects with `Last-Event-ID` gets exactly
the events it missed; a Last-Event-ID that is not a seq (negative, past 2^63-1, not a number) is
refused with 422 before the stream starts, never mid-stream. A job stream starts with a `snapshot`
(the whole JobPublic, id = the job's latest seq) unless it is a resumption, and ends once the job
is terminal and one more read of the log came back empty. Every stream ends after `max_duration_s`
at the latest; clients reconnect. A terminal `phase` event carries the job's final `usage`
(chip-hours and cost, as JobPublic.usage), added as it is sent: an ended job's usage never changes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from service.api.deps import CallerDep, Runtime, RuntimeDep, VisibleJobDep
from service.api.errors import error_responses
from service.api.sse import KEEPALIVE, KEEPALIVE_S, StreamHello, sse_event, sse_response, stream_response
from service.domain.models import JobEvent, JobPublic
from service.domain.phases import TERMINAL
from service.domain.usage import job_usage

router = APIRouter(tags=["events"])

MAX_EVENT_SEQ = 2**63 - 1  # event seqs are the store's signed 64-bit keys; a larger id cannot be one we sent
LastEventId = Annotated[
    int | None,
    Header(
        alias="Last-Event-ID", ge=0, le=MAX_EVENT_SEQ,
        description="resume after this seq (an `id` this service sent); outside 0..2^63-1 it is refused with 422",
    ),
]  # fmt: skip
MaxDuration = Annotated[float | None, Query(gt=0, le=86_400, description="end the stream after this many seconds")]
BATCH = 500


def _sse(event: JobEvent) -> bytes:
    return sse_event(event.kind, event.seq, event.model_dump(mode="json"))


_TERMINAL_VALUES = frozenset(phase.value for phase in TERMINAL)


async def _with_usage(runtime: Runtime, event: JobEvent) -> JobEvent:
    """A terminal phase event with the job's final usage; any other event as it is."""
    if event.kind != "phase" or event.data.get("phase") not in _TERMINAL_VALUES:
        return event
    record = await run_in_threadpool(runtime.store.get, event.job_id)
    if record is None:
        return event
    usage = job_usage(record, runtime.clock(), runtime.settings.usage_prices_usd_per_chip_hour)
    return event.model_copy(update={"data": {**event.data, "usage": usage.model_dump(mode="json")}})


def _deadline(runtime: Runtime, max_duration_s: float | None) -> float:
    limit_s = runtime.settings.sse_max_duration_s
    return time.monotonic() + min(max_duration_s or limit_s, limit_s)


@router.get(
    "/v1/jobs/{job_id}/events", response_class=StreamingResponse,
    responses={**stream_response("snapshot", JobPublic), **error_responses(401, 404, 422, 503)},
)  # fmt: skip
async def job_events(
    record: VisibleJobDep, runtime: RuntimeDep, last_event_id: LastEventId = None, max_duration_s: MaxDuration = None
) -> StreamingResponse:
    """A snapshot, then every change of this job, ending after its terminal phase."""
    settings, store, deadline = runtime.settings, runtime.store, _deadline(runtime, max_duration_s)

    async def stream() -> AsyncIterator[bytes]:
        if last_event_id is None:
            current = await run_in_threadpool(store.get, record.id) or record
            yield sse_event("snapshot", current.last_event_seq, runtime.public(current).model_dump(mode="json"))
            after = current.last_event_seq
        else:
            after = last_event_id
        last_sent = time.monotonic()
        while time.monotonic() < deadline:
            seen_version = runtime.notifier.version
            events = await run_in_threadpool(store.events_after, after, job_id=record.id, limit=BATCH)
            for event in events:
                yield _sse(await _with_usage(runtime, event))
                after, last_sent = event.seq, time.monotonic()
            if events:
                continue
            latest = await run_in_threadpool(store.get, record.id)
            if latest is None or (latest.phase.is_terminal() and latest.last_event_seq <= after):
                return  # terminal, everything sent, and this read was the one more empty read
            await runtime.notifier.wait(seen_version, settings.sse_poll_interval_s)
            if time.monotonic() - last_sent >= KEEPALIVE_S:
                yield KEEPALIVE
                last_sent = time.monotonic()

    return sse_response(stream())


@router.get(
    "/v1/events", response_class=StreamingResponse,
    responses={**stream_response("hello", StreamHello), **error_responses(401, 422, 503)},
)  # fmt: skip
async def team_events(
    caller: CallerDep,
    runtime: RuntimeDep,
    last_event_id: LastEventId = None,
    max_duration_s: MaxDuration = None,
    team: Annotated[str | None, Query(max_length=63, description="admins: one team's events; default all")] = None,
) -> StreamingResponse:
    """Every change of every job your team can see, from now (or after Last-Event-ID); for dashboards."""
    settings, store, deadline = runtime.settings, runtime.store, _deadline(runtime, max_duration_s)
    scope = team if caller.admin else caller.team

    async def stream() -> AsyncIterator[bytes]:
        after = last_event_id if last_event_id is not None else await run_in_threadpool(store.max_event_seq)
        # The first event tells the client where "now" is, so it can resume even if nothing happens.
        yield sse_event("hello", after, StreamHello(team=scope, after=after).model_dump())
        last_sent = time.monotonic()
        while time.monotonic() < deadline:
            seen_version = runtime.notifier.version
            events = await run_in_threadpool(store.events_after, after, team=scope, limit=BATCH)
            for event in events:
                yield _sse(await _with_usage(runtime, event))
                after, last_sent = event.seq, time.monotonic()
            if events:
                continue
            wait_s = min(settings.sse_poll_interval_s, max(0.0, deadline - time.monotonic()))
            await runtime.notifier.wait(seen_version, wait_s)
            if time.monotonic() - last_sent >= KEEPALIVE_S:
                yield KEEPALIVE
                last_sent = time.monotonic()

    return sse_response(stream())
