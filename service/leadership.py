"""Leadership: which replica runs the supervisor (launch, watch, reconcile) and when that changes.

Every replica serves reads, streams and submissions; only the one holding the leader lock
(service/adapters/leader_locks.py) hands jobs to the launcher and turns what the backend says into
phases. A replica that does not lead tries to take the lock every `check_interval_s`; the leader checks
it still holds it as often, and stops its supervisor the moment it does not (its successor re-attaches
every job, as after a restart).

Between a leader losing its database connection and noticing (at most one check interval) both may act;
what they could both do is idempotent per job id (a launch of an existing workload finds it, a phase
write is checked against the transition table under the job's row lock), so the overlap costs at most
a duplicated request to the backend, never a second job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from service.adapters.leader_locks import LeaderLock

log = logging.getLogger(__name__)


class Leadership:
    def __init__(
        self,
        lock: LeaderLock,
        *,
        on_elected: Callable[[], None],
        on_deposed: Callable[[], None],
        check_interval_s: float,
    ) -> None:
        self.lock = lock
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self.check_interval_s = check_interval_s
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leads(self) -> bool:
        return self._leading.is_set()

    @property
    def role(self) -> str:
        return "leader" if self.leads else "follower"

    def start(self) -> None:
        """Try once now (a sole replica leads before its first request), then keep trying in a thread."""
        self._stop.clear()
        self.check_once()
        if self.lock.shared:
            self._thread = threading.Thread(target=self._run, name="rljob-leadership", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._leading.is_set():
            self._leading.clear()
            self._on_deposed()
        self.lock.release()

    def check_once(self) -> None:
        if self._leading.is_set():
            if not self.lock.holds():
                self._leading.clear()
                log.error("this replica lost the leader lock; stopping launch, watch and reconcile here")
                self._on_deposed()
        elif self.lock.try_acquire():
            self._leading.set()
            log.info("this replica leads: it launches, watches and reconciles jobs")
            try:
                self._on_elected()
            except Exception:
                # A half-started term must not be left holding the lock: give it up for another replica.
                log.exception("starting the leader's work failed; giving the lead up")
                self._leading.clear()
                self._on_deposed()
                self.lock.release()

    def _run(self) -> None:
        while not self._stop.wait(self.check_interval_s):
            try:
                self.check_once()
            except Exception:
                log.exception("leader check failed; trying again in %.1fs", self.check_interval_s)
