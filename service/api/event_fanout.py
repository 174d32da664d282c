"""One reader of the job event log per process, fanning new events out to every open event stream.

Each SSE stream used to poll the store on its own, so database work grew with subscribers x poll rate.
Here one task reads what is new (woken by the ChangeNotifier after each commit, and every
`poll_interval_s` for writes it is not told about) and offers each event, encoded once, to the bounded
queue of every stream that wants it: its job's, its team's, every team's. Offering never waits: a
stream whose queue is full is ended (the route sends a `reconnect` event and the client resumes from
the store with Last-Event-ID), so one slow client never delays the others.

The hand-over from replay to live: `subscribe()` records `head`, the last seq the reader has offered.
Every later event of the stream's scope reaches its queue; every event up to `head` is committed, so a
replay from the store that reads until a short batch has covered it (events commit in seq order, across
replicas too: on PostgreSQL an event insert holds a transaction lock until its commit, sql_store.py).
The stream then takes from its queue, skipping what the replay already sent: no gap, no duplicate.

The app's serving parts own the one fan-out of its process (`ApiServing.fanout`, service/api/serving.py):
it is started after the runtime and stopped before it, and the event routes get it as a dependency
(service/api/deps.py FanoutDep).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import anyio
import anyio.to_thread

from service.change_notifier import ChangeNotifier
from service.domain.records.models import JobEvent
from service.domain.records.ports import JobStore

from .sse import sse_event

log = logging.getLogger(__name__)

READ_BATCH = 500
T = TypeVar("T")


class StreamEnd(enum.StrEnum):
    """Why the service ended a stream before its client or its deadline did."""

    SLOW = "slow"  # its queue overflowed: the client reads slower than events arrive
    SHUTDOWN = "shutdown"  # the service is stopping; another replica, or this one restarted, resumes it


class StreamEnded(Exception):
    def __init__(self, reason: StreamEnd) -> None:
        super().__init__(reason.value)
        self.reason = reason


@dataclass(frozen=True)
class StreamScope:
    """Which events a stream wants: one job's, one team's, or (both None) every team's."""

    job_id: str | None = None
    team: str | None = None

    @property
    def key(self) -> tuple[str, str | None]:
        if self.job_id is not None:
            return ("job", self.job_id)
        return ("team", self.team) if self.team is not None else ("all", None)


def _keys_of(event: JobEvent) -> tuple[tuple[str, str | None], ...]:
    return (("job", event.job_id), ("team", event.team), ("all", None))


@dataclass(frozen=True)
class FannedEvent:
    event: JobEvent
    frame: bytes  # the SSE block, encoded once for every stream that gets it

    @classmethod
    def of(cls, event: JobEvent) -> FannedEvent:
        return cls(event, sse_event(event.kind, event.seq, event.model_dump(mode="json")))


@dataclass(eq=False)
class Subscription:
    """One stream's place in the fan-out: its scope, the reader's `head` when it joined, its queue."""

    fanout: EventFanout
    scope: StreamScope
    head: int
    queue: asyncio.Queue[FannedEvent | None]
    ended: StreamEnd | None = None
    _woken: bool = field(default=False, repr=False)

    def offer(self, item: FannedEvent) -> bool:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            return False
        return True

    def end(self, reason: StreamEnd) -> None:
        if self.ended is not None:
            return
        self.ended = reason
        while not self.queue.empty():  # what it had not taken is in the store; free it now
            self.queue.get_nowait()
        self.queue.put_nowait(None)  # wakes a stream waiting on its empty queue

    @property
    def idle(self) -> bool:
        return self.queue.empty()

    async def events(self, after: int, *, until: float, idle_s: float) -> AsyncIterator[FannedEvent | None]:
        """Events of this scope after seq `after`, in order, without gap or duplicate: first from the
        store (when `after` is behind `head`), then live. Yields None after `idle_s` without an event (a
        keepalive's moment); ends at monotonic time `until`; raises StreamEnded when the service ends it."""
        last = after
        if after < self.head:
            while True:
                batch = await self.fanout.read(
                    partial(self.fanout.store.events_after, last, job_id=self.scope.job_id, team=self.scope.team, limit=READ_BATCH)
                )
                for event in batch:
                    if self.ended is not None:
                        raise StreamEnded(self.ended)
                    yield FannedEvent.of(event)
                    last = event.seq
                if len(batch) < READ_BATCH:
                    break
        while (left_s := until - time.monotonic()) > 0:
            if self.ended is not None:
                raise StreamEnded(self.ended)
            try:
                item = await asyncio.wait_for(self.queue.get(), min(idle_s, left_s))
            except TimeoutError:
                yield None
                continue
            if item is None:
                raise StreamEnded(self.ended or StreamEnd.SHUTDOWN)
            if item.event.seq > last:
                yield item
                last = item.event.seq


class EventFanout:
    """The one reader of new job events in this process, and the streams it feeds."""

    def __init__(self, store: JobStore, notifier: ChangeNotifier, *, poll_interval_s: float, queue_size: int) -> None:
        self.store = store
        self.notifier = notifier
        self.poll_interval_s = poll_interval_s
        self.queue_size = queue_size
        self.head = 0
        self.reads = 0  # reads of new events by the reader (replays not counted)
        self._subscribers: dict[tuple[str, str | None], set[Subscription]] = {}
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        # Its own thread slot: a thread pool busy with requests must not hold the live feed back.
        self._reader_limiter = anyio.CapacityLimiter(1)

    async def read(self, call: Callable[[], T]) -> T:
        """A store call off the event loop (replays use the shared thread pool, like any request)."""
        return await anyio.to_thread.run_sync(call)

    async def start(self) -> None:
        self.head = await anyio.to_thread.run_sync(self.store.max_event_seq, limiter=self._reader_limiter)
        self._task = asyncio.create_task(self._read_forever(), name="rljob-event-fanout")
        self._task.add_done_callback(self._reader_ended)

    def _reader_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return  # stop()
        # Streams would wait for events that never come: end them, so clients reconnect and see the error.
        log.error("the event reader stopped: %r; ending every stream", task.exception())
        self.end_streams()

    def end_streams(self) -> None:
        """End every open stream and refuse new ones (SIGTERM: uvicorn waits for open connections
        before it stops the app, and an event stream never closes by itself)."""
        self._closed = True
        for subs in list(self._subscribers.values()):
            for sub in list(subs):
                sub.end(StreamEnd.SHUTDOWN)

    async def stop(self) -> None:
        self.end_streams()
        if self._task is not None and not self._task.done():  # a reader that died was logged when it did
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    @contextlib.contextmanager
    def subscribe(self, scope: StreamScope) -> Iterator[Subscription]:
        sub = Subscription(self, scope, self.head, asyncio.Queue(self.queue_size))
        if self._closed:
            sub.end(StreamEnd.SHUTDOWN)
        else:
            self._subscribers.setdefault(scope.key, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._subscribers.get(scope.key)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subscribers[scope.key]

    async def _read_forever(self) -> None:
        # A read never holds more than one queue's worth, so a burst of commits cannot end a stream that
        # keeps up: it drains its queue while the next read runs in its thread.
        batch = min(READ_BATCH, self.queue_size)
        while True:
            seen_version = self.notifier.version
            try:
                events = await anyio.to_thread.run_sync(
                    partial(self.store.events_after, self.head, limit=batch), limiter=self._reader_limiter
                )
            except Exception:  # a database hiccup: the streams wait, the reader tries again
                log.exception("reading new job events failed; trying again in %.1fs", self.poll_interval_s)
                events = []
            self.reads += 1
            self.dispatch(events)
            if len(events) < batch:
                await self.notifier.wait(seen_version, self.poll_interval_s)

    def dispatch(self, events: list[JobEvent]) -> None:
        """Offer each event to every stream whose scope it is in; end those whose queue is full.
        Synchronous on the event loop, so `head` and the queues always agree for a new subscriber."""
        for event in events:
            fanned: FannedEvent | None = None
            for key in _keys_of(event):
                for sub in list(self._subscribers.get(key, ())):
                    fanned = fanned or FannedEvent.of(event)
                    if sub.ended is None and not sub.offer(fanned):
                        sub.end(StreamEnd.SLOW)
            self.head = max(self.head, event.seq)
