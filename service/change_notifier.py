"""ChangeNotifier: wakes SSE streams when a job's event log grows.

The job service calls `notify()` after every commit that logged something (from any thread); each
stream awaits `wait()` on its own event loop between reads of the event log.
"""

from __future__ import annotations

import asyncio
import threading


class ChangeNotifier:
    """Wakes SSE streams when the event log grows; a version counter means no wake-up is lost
    between a stream's empty read and its wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    @property
    def version(self) -> int:
        return self._version

    def notify(self) -> None:
        with self._lock:
            self._version += 1
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass  # that stream's loop has closed

    async def wait(self, seen_version: int, timeout_s: float) -> None:
        """Return when the version moves past `seen_version`, or after timeout_s."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            if self._version != seen_version:
                return
            self._waiters.add(entry)
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(entry)
