"""FoldPacer: the share of the service's CPU that folding trainer events may take, and the size of one fold.

The service folds trainer events (parse, fold, one INSERT) in a background thread of the same process that
answers requests, so on CPython the fold and every request share one interpreter lock. A job that writes
events as fast as it can (a reward function can append to events.jsonl) kept that thread busy for as long as
it wrote: the fold of 200,000 events took about 20 s of CPU in one stretch, and another team's requests
waited for the lock in every one of them (their p95 went to x11-x25 of its value at rest in
bench/control_plane/hostile_load.py). Two things bound that here:

- a fold takes at most FOLD_CHUNK_EVENTS events (one transaction each; the fold drops events by seq, so a
  batch folded in several is the same as one), so the lock is held in stretches of about 10 ms;
- between folds, the pacer rests so the folds' CPU time stays within `share` of the wall time: a fold that
  used t seconds of its thread's CPU is followed by t * (1 - share) / share seconds with no fold.

A trainer writes an event a step (seconds apart), so a real job's fold is one small chunk a poll round, and its
rest is over long before the next round; only a job that writes faster than the service folds at its share
waits, and its status catches up at that pace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

FOLD_CHUNK_EVENTS = 128  # about 10 ms of fold (90 us an event, bench/control_plane/hostile_load.py's events)
MAX_REST_S = 1.0  # one rest at most: one slow fold (a cold cache, a big record) must not stop folding for long


class FoldPacer:
    def __init__(
        self,
        share: float,
        *,
        cpu_clock: Callable[[], float] = time.thread_time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"a fold's CPU share must be in (0, 1], not {share}")
        self.share = share
        self._cpu_clock, self._monotonic, self._sleep = cpu_clock, monotonic, sleep
        self._next_fold_at = 0.0  # monotonic time before which no fold starts
        self._lock = threading.Lock()

    @contextmanager
    def fold(self) -> Iterator[None]:
        """Wait for the fold's turn, run it, then set the rest its CPU time earns."""
        with self._lock:
            wait = self._next_fold_at - self._monotonic()
        if wait > 0:
            self._sleep(wait)
        started = self._cpu_clock()  # this thread's CPU: what the fold took of the interpreter, not its waits
        try:
            yield
        finally:
            used = self._cpu_clock() - started
            rest = min(used * (1 - self.share) / self.share, MAX_REST_S)
            with self._lock:
                self._next_fold_at = max(self._next_fold_at, self._monotonic() + rest)
