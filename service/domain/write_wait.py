"""A request's write waits a bounded time for the database, then gives up with StoreUnavailable (503 with Retry-After)
having changed nothing.

Why: under a locked database a POST waited 29.5 s, as long as the CLI's 30 s timeout, so the user saw a timeout and
could not tell whether the job was stored. A write waits twice: for this process's write lock (JobService writes one
at a time, and each write queued ahead may be waiting out the store's 10 s busy timeout: a cancel behind one of the
leader's writes took 20 s), then for the database's own lock. `held_within` bounds the first and hands what is left
of the bound to the store's transaction (JobStore.transaction(wait_s=...)), which bounds the second. The leader's own
writes (launches, observations, progress) keep the store's wait: no client is waiting for their answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from service.domain.records.errors import StoreUnavailable

MIN_DATABASE_WAIT_S = 0.05  # what the database is given when the lock took almost all of the bound


@contextmanager
def held_within(lock: threading.RLock, wait_s: float | None) -> Iterator[float | None]:
    """`lock` held for the block, taken within `wait_s` (None: however long it takes); yields the seconds left of
    `wait_s` for the database's lock (None when unbounded)."""
    if wait_s is None:
        with lock:
            yield None
        return
    started = time.monotonic()
    if not lock.acquire(timeout=wait_s):
        raise StoreUnavailable(
            f"the database's write lock was not free within {wait_s:g} s: this replica's writes before this one are "
            "still waiting for it (another writer holds it); nothing was stored; retry in a moment"
        )
    try:
        yield max(MIN_DATABASE_WAIT_S, wait_s - (time.monotonic() - started))
    finally:
        lock.release()
