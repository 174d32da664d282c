"""Server-Sent Events: a job's changes (/v1/jobs/{id}/events) and all of a team's (/v1/events).

Every SSE `id` is the event-log seq, so a client that reconnects with `Last-Event-ID` gets exactly
the events it missed; a Last-Event-ID that is not a seq (negative, past 2^63-1, not a number) is
refused with 422 before the stream starts, never mid-stream. A job stream starts with a `snapshot`
(the whole JobPublic, id = the job's latest seq) unless it is a resumption, and ends once the job
is terminal and one more read of the job found nothing unsent. Every stream ends after
`max_duration_s` at the latest; clients reconnect. A terminal `phase` event carries the job's final
`usage` (chip-hours and cost, as JobPublic.usage), added as it is sent: an ended job's usage never changes.

Streams do not read the event log themselves while live: the process's one reader
(api/event_fanout.py) pushes new events to them. A stream reads the store only to replay what a
resuming client missed, and a job stream reads its job for the snapshot and once more at the end.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from service.api.deps import CallerDep, ClockDep, FanoutDep, PublicDep, SettingsDep, StoreDep, VisibleJobDep
from service.api.errors import error_responses
from service.api.event_fanout import FannedEvent, StreamEnded, StreamScope, Subscription
from service.api.sse import KEEPALIVE, KEEPALIVE_S, StreamHello, sse_event, sse_reconnect, sse_response, stream_response
from service.config import Settings
from service.domain.cost.usage import job_usage
from service.domain.records.models import JobEvent, JobPublic, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import Clock, JobStore

router = APIRouter(tags=["events"])

MAX_EVENT_SEQ = 2**63 - 1  # event seqs are the store's signed 64-bit keys; a larger id cannot be one we sent
LastEventId = Annotated[
    int | None,
    Header(
        alias="Last-Event-ID",
        ge=0,
        le=MAX_EVENT_SEQ,
        description="resume after this seq (an `id` this service sent); outside 0..2^63-1 it is refused with 422",
    ),
]
MaxDuration = Annotated[float | None, Query(gt=0, le=86_400, description="end the stream after this many seconds")]


@dataclass(frozen=True)
class StreamContext:
    """What a stream reads besides its subscription: the job's record at its start and end, the time and
    prices for a final usage, the stream's time limit."""

    store: JobStore
    clock: Clock
    settings: Settings
    public: Callable[[JobRecord], JobPublic]


async def stream_context(store: StoreDep, clock: ClockDep, settings: SettingsDep, public: PublicDep) -> StreamContext:
    return StreamContext(store, clock, settings, public)


StreamContextDep = Annotated[StreamContext, Depends(stream_context)]


def _deadline(ctx: StreamContext, max_duration_s: float | None) -> float:
    limit_s = ctx.settings.sse_max_duration_s
    return time.monotonic() + min(max_duration_s or limit_s, limit_s)


def _ends_job(event: JobEvent) -> bool:
    return event.kind == "phase" and JobPhase(event.data.get("phase", JobPhase.RUNNING)).is_terminal()


async def _frame(ctx: StreamContext, item: FannedEvent) -> bytes:
    """The event's shared frame; a job's terminal phase event re-encoded with the job's final usage
    (once per job end per stream: the prices are settings, so usage is not in the stored event)."""
    if not _ends_job(item.event):
        return item.frame
    record = await run_in_threadpool(ctx.store.get, item.event.job_id)
    if record is None:
        return item.frame
    usage = job_usage(record, ctx.clock(), ctx.settings.usage_prices_usd_per_chip_hour)
    event = item.event.model_copy(update={"data": {**item.event.data, "usage": usage.model_dump(mode="json")}})
    return sse_event(event.kind, event.seq, event.model_dump(mode="json"))


async def _live(
    ctx: StreamContext,
    sub: Subscription,
    after: int,
    deadline: float,
    on_event: Callable[[JobEvent], Awaitable[bool]] | None = None,
) -> AsyncIterator[bytes]:
    """The subscription's events as SSE, keepalives while idle, and `reconnect` if the service ends it.
    `on_event` runs after each event is sent; True ends the stream (a job's end)."""
    last, last_sent = after, time.monotonic()
    try:
        async for item in sub.events(after, until=deadline, idle_s=KEEPALIVE_S):
            if item is None:
                if time.monotonic() - last_sent >= KEEPALIVE_S:
                    yield KEEPALIVE
                    last_sent = time.monotonic()
                continue
            yield await _frame(ctx, item)
            last, last_sent = item.event.seq, time.monotonic()
            if on_event is not None and await on_event(item.event):
                return
    except StreamEnded as e:
        yield sse_reconnect(last, e.reason.value)


@router.get(
    "/v1/jobs/{job_id}/events",
    response_class=StreamingResponse,
    responses={**stream_response("snapshot", JobPublic), **error_responses(401, 404, 422, 503)},
)
async def job_events(
    record: VisibleJobDep,
    ctx: StreamContextDep,
    fanout: FanoutDep,
    last_event_id: LastEventId = None,
    max_duration_s: MaxDuration = None,
) -> StreamingResponse:
    """A snapshot, then every change of this job, ending after its terminal phase."""
    store, deadline = ctx.store, _deadline(ctx, max_duration_s)

    async def stream() -> AsyncIterator[bytes]:
        with fanout.subscribe(StreamScope(job_id=record.id)) as sub:
            current = await run_in_threadpool(store.get, record.id) or record
            if last_event_id is None:
                yield sse_event("snapshot", current.last_event_seq, ctx.public(current).model_dump(mode="json"))
                # Read after subscribing, the snapshot holds every event of this job up to sub.head:
                # there is nothing to replay, and the queue has the rest.
                after = max(current.last_event_seq, sub.head)
            else:
                after = last_event_id
            end_seq = current.last_event_seq if current.phase.is_terminal() else None

            async def ended(event: JobEvent | None) -> bool:
                nonlocal end_seq
                if event is not None and _ends_job(event):
                    end_seq = max(end_seq or 0, event.seq)
                sent = event.seq if event is not None else after
                if end_seq is None or sent < end_seq:
                    return False
                latest = await run_in_threadpool(store.get, record.id)  # the one more read
                if latest is None or latest.last_event_seq <= sent:
                    return True
                end_seq = latest.last_event_seq
                return False

            if await ended(None):
                return
            async for chunk in _live(ctx, sub, after, deadline, ended):
                yield chunk

    return sse_response(stream())


@router.get(
    "/v1/events",
    response_class=StreamingResponse,
    responses={**stream_response("hello", StreamHello), **error_responses(401, 422, 503)},
)
async def team_events(
    caller: CallerDep,
    ctx: StreamContextDep,
    fanout: FanoutDep,
    last_event_id: LastEventId = None,
    max_duration_s: MaxDuration = None,
    team: Annotated[str | None, Query(max_length=63, description="admins: one team's events; default all")] = None,
) -> StreamingResponse:
    """Every change of every job your team can see, from now (or after Last-Event-ID); for dashboards."""
    deadline = _deadline(ctx, max_duration_s)
    scope = team if caller.admin else caller.team

    async def stream() -> AsyncIterator[bytes]:
        with fanout.subscribe(StreamScope(team=scope)) as sub:
            after = last_event_id if last_event_id is not None else sub.head
            # The first event tells the client where "now" is, so it can resume even if nothing happens.
            yield sse_event("hello", after, StreamHello(team=scope, after=after).model_dump())
            async for chunk in _live(ctx, sub, after, deadline):
                yield chunk

    return sse_response(stream())
