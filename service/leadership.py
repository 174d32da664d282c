"""Leadership: which replica runs the supervisor (launch, watch, reconcile) and when that changes.

Every replica serves reads, streams and submissions; only the one holding the leader lock (the
LeaderLock port, service/domain/records/ports.py; its adapters in service/adapters/leader_locks.py) hands
jobs to the launcher and turns what the backend says into phases. A replica that does not lead tries
to take the lock every `check_interval_s`; the leader checks it still holds it as often, and stops
its supervisor the moment it does not (its successor re-attaches every job, as after a restart).

Fencing. Each replica that takes the lock also takes the next leadership term from the database (a
number that only grows, service/adapters/store/leader_terms.py) and writes its leader work (launch
records, phases from observations, progress, take-overs) only through transactions that check the term
is still its own. A leader whose lock session died (a network partition, a process paused and resumed)
goes on running until its next check, but the moment its successor has taken a newer term each of its
writes is refused in its own transaction (LeaderFenced), and the first refusal stops its leader work at
once (`fenced`). What it sent to the backend before that is idempotent per job id (a deterministic
Kubernetes Job name; a local launch that finds the job's runner alive adopts it), so the overlap costs
at most a duplicated request, never a second job or a phase from a term that has ended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from service.background_loop import BackgroundLoop
from service.domain.records.ports import LeaderLock

log = logging.getLogger(__name__)


class Leadership:
    def __init__(
        self,
        lock: LeaderLock,
        *,
        take_term: Callable[[], int],
        on_elected: Callable[[int], None],
        on_deposed: Callable[[], None],
        check_interval_s: float,
    ) -> None:
        self.lock = lock
        self._take_term = take_term
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._changing = threading.RLock()  # one change of role at a time (the check thread, a fence)
        self._fence_pending = threading.Event()  # fenced, its leader work not stopped yet: do not lead again
        self.term: int | None = None
        self.check_interval_s = check_interval_s
        self._leading = threading.Event()
        self._checks: BackgroundLoop | None = None

    @property
    def leads(self) -> bool:
        return self._leading.is_set()

    @property
    def role(self) -> str:
        return "leader" if self.leads else "follower"

    def start(self) -> None:
        """Try once now (a sole replica leads before its first request), then keep trying in a thread
        (a failed check is logged and tried again at the next interval)."""
        self.check_once()
        if self.lock.shared:
            self._checks = BackgroundLoop(
                "rljob-leadership", self.check_once, interval_s=self.check_interval_s, wait_first=True, what="leader check"
            )
            self._checks.start()

    def stop(self) -> None:
        if self._checks is not None:
            self._checks.stop(timeout_s=10)
            self._checks = None
        with self._changing:
            if self._leading.is_set():
                self._leading.clear()
                self._on_deposed()
            self.lock.release()

    def fenced(self) -> None:
        """A write of this replica's term was refused: another replica leads now. Stop at once rather than
        at the next check. The supervisor is stopped from a thread of its own, since the refusal is
        usually seen on one of the supervisor's threads, which stopping it joins."""
        if not self._leading.is_set():
            return
        self._fence_pending.set()
        self._leading.clear()
        log.error("this replica's term %s has ended (another replica took a newer one); stopping its leader work", self.term)
        threading.Thread(target=self._depose_after_fence, name="rljob-fenced", daemon=True).start()

    def _depose_after_fence(self) -> None:
        try:
            with self._changing:
                self._on_deposed()
                self.lock.release()  # not held any more (the successor holds it); drop its connection
        finally:
            self._fence_pending.clear()

    def check_once(self) -> None:
        if self._fence_pending.is_set():
            return  # the fenced term's work is still being stopped
        with self._changing:
            # Again under the lock: a fence between the look above and here has cleared `_leading` (after setting
            # the pending flag), and leading again now would start a term the fence's depose then stops, while the
            # fenced term's supervisor, not yet stopped, runs on beside it.
            if self._fence_pending.is_set():
                return
            if self._leading.is_set():
                if not self.lock.holds():
                    self._leading.clear()
                    log.error("this replica lost the leader lock; stopping launch, watch and reconcile here")
                    self._on_deposed()
            elif self.lock.try_acquire():
                self._elect()

    def _elect(self) -> None:
        try:
            self.term = self._take_term()
            self._leading.set()
            log.info("this replica leads (term %s): it launches, watches and reconciles jobs", self.term)
            self._on_elected(self.term)
        except Exception:
            # A half-started term must not be left holding the lock: give it up for another replica.
            log.exception("starting the leader's work failed; giving the lead up")
            if self._leading.is_set():
                self._leading.clear()
                self._on_deposed()
            self.lock.release()
