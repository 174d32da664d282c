"""One way to run background work: a named daemon thread that repeats one round until stopped.

The supervisor, leadership, the status mirror, both launchers and the Kubernetes watcher each run
such a loop. What they share lives here: the thread and its name, the stop event, waking a loop
early (an offer, a dirty job), a join bounded by a deadline, and what happens when a round raises
(logged with the loop's name, then the loop goes on after `retry_s`: one bad round, a database
hiccup, must not end a loop for good). What each loop does in a round, and how long it waits
before the next, stays with its owner: a round returns the seconds to wait, or None for the
loop's `interval_s`.

Kept free of the service's frameworks and adapters, so the domain (status_mirror.py) may use it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

# Seconds to wait before the next round; None: the loop's own interval.
Round = Callable[[], float | None]


class BackgroundLoop:
    """Runs `one_round` on a daemon thread called `name` until stopped.

    interval_s: the wait after a round that returns None; None itself means "until woken" (a loop
    with nothing to do until someone offers work). wait_first: wait one interval before the first
    round (a loop whose first round was just done by its owner). retry_s: the wait after a round
    that raised (default interval_s). stop: an event shared with the round, for rounds that block
    (a watch stream, a queue read) and must see the stop themselves; one of its own otherwise. woken: an event
    that runs the next round at once when set, for owners that queue work from another thread (`wake()` sets it).
    what: what a round does, named in the log line when one fails.
    """

    def __init__(
        self,
        name: str,
        one_round: Round,
        *,
        interval_s: float | None,
        wait_first: bool = False,
        retry_s: float | None = None,
        stop: threading.Event | None = None,
        woken: threading.Event | None = None,
        what: str = "a round",
    ) -> None:
        self.name = name
        self.what = what  # what a round does, for the log line when one fails: "leader check"
        self._one_round = one_round
        self.interval_s = interval_s
        self._wait_first = wait_first
        self._retry_s = retry_s if retry_s is not None else interval_s
        self.stop_event = stop if stop is not None else threading.Event()
        self._woken = woken if woken is not None else threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} started twice")
        self.stop_event.clear()
        self._woken.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run the next round now (or as soon as the current one ends)."""
        self._woken.set()

    def request_stop(self) -> None:
        """Ask the loop to end after its current round, without waiting for it."""
        self.stop_event.set()
        self._woken.set()

    def join(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the thread to end; False (and a warning) when it did not."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout=max(0.0, timeout_s))
        if thread.is_alive():
            log.warning("thread %s did not stop within %.1fs", self.name, timeout_s)
            return False
        self._thread = None
        return True

    def stop(self, timeout_s: float = 10.0) -> bool:
        self.request_stop()
        return self.join(timeout_s)

    def _wait(self, seconds: float | None) -> None:
        """Until `seconds` pass, the loop is woken, or it is stopped."""
        self._woken.wait(seconds)
        self._woken.clear()

    def _run(self) -> None:
        if self._wait_first:
            self._wait(self.interval_s)
        while not self.stop_event.is_set():
            try:
                wait_s = self._one_round()
            except Exception:
                log.exception("%s: %s failed; trying again in %s", self.name, self.what, _seconds(self._retry_s))
                wait_s = self._retry_s
            else:
                wait_s = self.interval_s if wait_s is None else wait_s
            if self.stop_event.is_set():
                return
            if wait_s is None or wait_s > 0:
                self._wait(wait_s)


def stop_all(loops: Iterable[BackgroundLoop], timeout_s: float) -> bool:
    """Ask every loop to stop at once, then join them all within one shared deadline."""
    loops = list(loops)
    for loop in loops:
        loop.request_stop()
    deadline = time.monotonic() + timeout_s
    stopped = True
    for loop in loops:
        stopped = loop.join(deadline - time.monotonic()) and stopped
    return stopped


def _seconds(value: float | None) -> str:
    return "when woken" if value is None else f"{value:.1f}s"
