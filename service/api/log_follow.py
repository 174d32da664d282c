"""Following a job's log (GET /v1/jobs/{id}/logs?follow=true) without tying up the thread pool.

The launcher's log iterator is synchronous. Each step runs in a worker thread on this module's own
capacity limiter, never the shared one every sync route uses, and takes every line that is ready (up to
CHUNK_BYTES) as one piece: a thread hop per line cost 45-90 us of CPU, and a busy trainer prints
thousands of lines a second (bench/control_plane/log_read_cpu.py measures both). A step ends at the launcher's None:
the local launcher's "nothing new", after which the stream waits on the event loop, checks whether the
client is still there and whether the job has ended, and asks again; the Kubernetes launcher's "what
arrived is given", before a pod-log read that blocks (bounded by its read timeout), on this limiter too.
At most `max_followers` streams run at once; one more is refused with 429.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import anyio
import anyio.to_thread

from service.domain.records.errors import TooManyLogFollowers

_END = object()
TERMINAL_CHECK_INTERVAL_S = 2.0  # an idle follow re-reads the job's phase at most this often
CHUNK_BYTES = 64 * 1024  # a log read without follow is sent in pieces of about this much


def log_chunks(lines: Iterator[str | None], chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """A finite log as pieces of whole lines (take_ready's, until the end). Starlette steps a sync body in a worker
    thread per item, so a body of one item per line paid a thread hop per line (45-90 us of CPU: 262 s for an 8 MiB
    stage log of 2-byte lines); per piece it pays one per 64 KiB (bench/control_plane/log_read_cpu.py)."""
    ended = False
    while not ended:
        piece, ended = take_ready(lines, chunk_bytes)
        if piece:
            yield piece


def take_ready(lines: Iterator[str | None], max_bytes: int = CHUNK_BYTES) -> tuple[bytes, bool]:
    """One step of a follow (in a worker thread): the lines ready now, up to about max_bytes, and whether the
    log has ended."""
    parts: list[str] = []
    size = 0
    ended = False
    while size < max_bytes:
        line = next(lines, _END)
        if line is _END:
            ended = True
            break
        if line is None:
            break
        parts.append(str(line))
        size += len(parts[-1]) + 1  # characters, not bytes: a piece of non-ASCII lines is at most 4 times as big
    return ("\n".join(parts) + "\n").encode() if parts else b"", ended


class FollowerSlot:
    """One claimed place; release() is idempotent (the stream's end and a never-started body both call it)."""

    def __init__(self, owner: LogFollowers, team: str) -> None:
        self._owner: LogFollowers | None = owner
        self._team = team

    def release(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            owner._release(self._team)


class LogFollowers:
    """The follows running now: at most `max_followers`, and at most `per_team` of one team's (one team following
    every log the service will stream would leave other teams only 429s)."""

    def __init__(self, max_followers: int, per_team: int | None = None) -> None:
        self.max_followers = max_followers
        self.per_team = per_team if per_team is not None else max_followers
        self._active = 0
        self._by_team: dict[str, int] = {}
        self._lock = threading.Lock()
        self._limiter: anyio.CapacityLimiter | None = None

    @property
    def active(self) -> int:
        return self._active

    def claim(self, team: str) -> FollowerSlot:
        with self._lock:
            if self._active >= self.max_followers:
                raise TooManyLogFollowers(self.max_followers)
            if self._by_team.get(team, 0) >= self.per_team:
                raise TooManyLogFollowers(self.per_team, team)
            self._active += 1
            self._by_team[team] = self._by_team.get(team, 0) + 1
        return FollowerSlot(self, team)

    def _release(self, team: str) -> None:
        with self._lock:
            self._active -= 1
            left = self._by_team.pop(team) - 1
            if left:
                self._by_team[team] = left

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made on first use, inside the event loop
            self._limiter = anyio.CapacityLimiter(self.max_followers)
        return self._limiter


class Pacer:
    """A follow's pace: a token bucket of `bytes_per_s`, holding up to `burst` bytes. A follow of a trainer that prints
    faster than that is read at this pace (from the file, or with the pod log's TCP window closing), so what one
    follow costs the service in CPU is bounded, whatever the trainer prints: 8 follows of a trainer printing 31 MiB
    of short lines slowed another team's requests five times (bench/control_plane/hostile_load.py)."""

    def __init__(self, bytes_per_s: float, burst: int = 4 * CHUNK_BYTES, clock: Callable[[], float] = time.monotonic) -> None:
        self.bytes_per_s, self.burst, self._clock = bytes_per_s, burst, clock
        self._allowance = float(burst)
        self._last = clock()

    def delay_after(self, sent: int) -> float:
        """Seconds to wait after sending `sent` bytes before sending more."""
        now = self._clock()
        self._allowance = min(self.burst, self._allowance + (now - self._last) * self.bytes_per_s) - sent
        self._last = now
        return max(0.0, -self._allowance / self.bytes_per_s)


def follow_log(
    lines: Iterator[str | None],
    followers: LogFollowers,
    team: str,
    *,
    is_disconnected: Callable[[], Awaitable[bool]],
    is_terminal: Callable[[], bool],
    poll_interval_s: float,
    pacer: Pacer,
) -> AsyncIterator[bytes]:
    """Claim a follower slot for `team` now (TooManyLogFollowers if none is free) and return the byte stream."""
    slot = followers.claim(team)
    body = _stream(lines, followers, slot, is_disconnected, is_terminal, poll_interval_s, pacer)
    weakref.finalize(body, slot.release)  # a body that never started still gives its slot back
    return body


async def _stream(
    lines: Iterator[str | None],
    followers: LogFollowers,
    slot: FollowerSlot,
    is_disconnected: Callable[[], Awaitable[bool]],
    is_terminal: Callable[[], bool],
    poll_interval_s: float,
    pacer: Pacer,
) -> AsyncIterator[bytes]:
    limiter = followers.limiter
    ending = False  # the job is terminal: stop after one more read that finds nothing
    next_terminal_check = 0.0
    try:
        while True:
            piece, ended = await anyio.to_thread.run_sync(take_ready, lines, limiter=limiter)
            if piece:
                yield piece
            if ended:
                return
            if piece:
                await anyio.sleep(pacer.delay_after(len(piece)))  # then ask again: more may be ready
                continue
            if ending or await is_disconnected():
                return
            if time.monotonic() >= next_terminal_check:
                next_terminal_check = time.monotonic() + TERMINAL_CHECK_INTERVAL_S
                ending = await anyio.to_thread.run_sync(is_terminal, limiter=limiter)
                if ending:
                    continue  # read once more at once
            await anyio.sleep(poll_interval_s)
    finally:
        slot.release()
        close = getattr(lines, "close", None)
        if close is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(close, limiter=limiter)
