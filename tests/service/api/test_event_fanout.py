"""The event fan-out (service/api/event_fanout.py) on an in-memory event log: one reader for any number
of streams, a slow stream ended without holding back the others, and the replay-to-live hand-over
without gap or duplicate."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from service.api import event_fanout
from service.api.event_fanout import EventFanout, StreamEnd, StreamEnded, StreamScope, Subscription
from service.change_notifier import ChangeNotifier
from service.domain.records.models import JobEvent

FOREVER_S = 3600.0


class EventLog:
    """Just the two reads the fan-out makes, counted."""

    def __init__(self) -> None:
        self.events: list[JobEvent] = []
        self.reads = 0

    def append(self, job_id: str = "rl-aaaaaaaaaaaa", team: str = "team-a") -> JobEvent:
        event = JobEvent(
            seq=len(self.events) + 1, job_id=job_id, team=team, kind="progress", time=datetime.now(UTC), data={"step": len(self.events)}
        )
        self.events.append(event)
        return event

    def events_after(self, after_seq: int, *, job_id: str | None = None, team: str | None = None, limit: int = 500) -> list[JobEvent]:
        self.reads += 1
        found = [e for e in self.events if e.seq > after_seq and job_id in (None, e.job_id) and team in (None, e.team)]
        return found[:limit]

    def max_event_seq(self) -> int:
        return len(self.events)


async def eventually(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


async def collect(sub: Subscription, after: int, into: list[int]) -> StreamEnd | None:
    try:
        async for item in sub.events(after, until=time.monotonic() + FOREVER_S, idle_s=FOREVER_S):
            if item is not None:
                into.append(item.event.seq)
    except StreamEnded as e:
        return e.reason
    return None


async def started(log: EventLog, notifier: ChangeNotifier, queue_size: int = 100) -> EventFanout:
    fanout = EventFanout(log, notifier, poll_interval_s=FOREVER_S, queue_size=queue_size)  # type: ignore[arg-type]
    await fanout.start()
    return fanout


def test_fifty_streams_get_every_event_from_one_reader() -> None:
    async def run() -> None:
        log, notifier = EventLog(), ChangeNotifier()
        fanout = await started(log, notifier)
        received: list[list[int]] = [[] for _ in range(50)]
        with contextlib.ExitStack() as stack:
            subs = [stack.enter_context(fanout.subscribe(StreamScope(team="team-a"))) for _ in range(50)]
            tasks = [asyncio.create_task(collect(sub, sub.head, got)) for sub, got in zip(subs, received, strict=True)]
            other_team = stack.enter_context(fanout.subscribe(StreamScope(team="team-b")))
            for n in range(1, 21):
                log.append()
                notifier.notify()
                await eventually(lambda n=n: all(len(got) == n for got in received))
            assert other_team.idle  # another team's stream was offered nothing
            for task in tasks:
                task.cancel()
        await fanout.stop()
        assert all(got == list(range(1, 21)) for got in received)
        # Every read of the log was the reader's (no stream read it), about one per commit.
        assert log.reads == fanout.reads <= 20 + 2, (log.reads, fanout.reads)

    asyncio.run(run())


def test_a_stream_that_never_reads_is_ended_and_the_others_get_everything_in_order() -> None:
    async def run() -> None:
        log, notifier = EventLog(), ChangeNotifier()
        fanout = await started(log, notifier, queue_size=5)
        fast: list[int] = []
        with fanout.subscribe(StreamScope()) as slow_sub, fanout.subscribe(StreamScope(team="team-a")) as fast_sub:
            fast_task = asyncio.create_task(collect(fast_sub, fast_sub.head, fast))
            for _ in range(40):
                log.append()
                notifier.notify()
                await asyncio.sleep(0)  # the reader may take several commits in one read: both happen
            await eventually(lambda: len(fast) == 40)
            assert slow_sub.ended is StreamEnd.SLOW
            slow: list[int] = []
            assert await collect(slow_sub, slow_sub.head, slow) is StreamEnd.SLOW and slow == []
            fast_task.cancel()
        await fanout.stop()
        assert fast == list(range(1, 41))

    asyncio.run(run())


@pytest.mark.parametrize("batch", [500, 3])
def test_resume_hands_over_from_replay_to_live_without_gap_or_duplicate(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_fanout, "READ_BATCH", batch)

    async def run() -> None:
        log, notifier = EventLog(), ChangeNotifier()
        for _ in range(10):
            log.append()
        fanout = await started(log, notifier)  # the reader starts at the live point: seq 10
        got: list[int] = []
        with fanout.subscribe(StreamScope(team="team-a")) as sub:
            assert sub.head == 10
            # While the stream replays, more is committed and the reader offers it live too: 11-13 reach
            # both the replay (a later read) and the queue; 14 only the queue.
            replay_read = fanout.read

            async def commit_then_read(call: Callable[[], list[JobEvent]]) -> list[JobEvent]:
                if len(log.events) == 10:
                    fanout.dispatch([log.append(), log.append(), log.append()])
                return await replay_read(call)

            fanout.read = commit_then_read  # type: ignore[method-assign]
            task = asyncio.create_task(collect(sub, 4, got))  # the client last saw seq 4
            await eventually(lambda: len(got) >= 9)
            fanout.dispatch([log.append()])
            await eventually(lambda: got[-1] == 14)
            task.cancel()
        await fanout.stop()
        assert got == list(range(5, 15))

    asyncio.run(run())


def test_streams_end_when_the_reader_dies_rather_than_wait_forever(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        log, notifier = EventLog(), ChangeNotifier()
        fanout = await started(log, notifier)
        with fanout.subscribe(StreamScope()) as sub:

            def broken(events: list[JobEvent]) -> None:
                if events:
                    raise RuntimeError("a bug in the reader")

            fanout.dispatch = broken  # type: ignore[method-assign]
            log.append()
            notifier.notify()
            got: list[int] = []
            assert await asyncio.wait_for(collect(sub, sub.head, got), 10) is StreamEnd.SHUTDOWN
        await fanout.stop()

    asyncio.run(run())
    assert any("the event reader stopped" in r.getMessage() for r in caplog.records)
