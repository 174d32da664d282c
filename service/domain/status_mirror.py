"""Mirrors each job's phase, stage and progress onto its workload (a launcher's `StatusMirror`).

The job service offers every committed change of a job that has a workload; a background thread
decides what is worth a write and sends it. Why a thread: the writes go to the Kubernetes API,
which may be slow or retrying, and neither the job service's write lock nor the progress poller
may wait on it. Why a throttle: a trainer reports every step, and patching a Job per step would
load the API server for nothing a person reads. A change of phase or stage is always sent; progress at most every `every_steps`
steps or `interval_s` seconds, and a held-back value is still sent once its interval has passed,
so the annotation never stays stale after training goes quiet.

The queue is one slot per job (the newest offer replaces an unsent one), so it is bounded by the
number of jobs and a slow API server can never make it grow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from service.background_loop import BackgroundLoop
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import StatusMirror

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MirroredStatus:
    phase: str  # lowercase, as Kubernetes label values read best: running, succeeded
    stage: str | None
    step: int | None
    total: int | None
    terminal: bool = False
    queue_position: int | None = None  # while QUEUED behind a backend's queue: place in line, if known
    queue_reason: str | None = None  # ... and why (None: not held by a queue)
    placement: str | None = None  # the flavor (or kind of capacity) it was admitted into: "tpu-v6e-2x4-spot"

    @classmethod
    def of(cls, record: JobRecord) -> MirroredStatus:
        queue = record.queue if record.phase is JobPhase.QUEUED else None
        return cls(
            record.phase.value.lower(),
            record.report.stage,
            record.report.step,
            record.report.total_steps,
            record.phase.is_terminal(),
            queue.position if queue else None,
            queue.reason if queue else None,
            (record.placement.flavor or record.placement.capacity) if record.placement else None,
        )


@dataclass(frozen=True)
class _Sent:
    status: MirroredStatus
    at_s: float


class StatusMirrorWorker:
    def __init__(
        self,
        mirror: StatusMirror,
        *,
        every_steps: int,
        interval_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._mirror = mirror
        self.every_steps = every_steps
        self.interval_s = interval_s
        self._monotonic = monotonic
        self._pending: dict[str, MirroredStatus] = {}
        self._sent: dict[str, _Sent] = {}
        self._lock = threading.Lock()
        self._loop: BackgroundLoop | None = None

    # -- called by the job service after a commit ------------------------------------------------

    def offer(self, job_id: str, status: MirroredStatus) -> None:
        with self._lock:
            self._pending[job_id] = status
        loop = self._loop
        if loop is not None:
            loop.wake()  # an offer during a pass makes the next pass start at once

    # -- the decision, kept pure so tests can drive it with a fake clock ------------------------

    def _due_in_s(self, job_id: str, status: MirroredStatus, now_s: float) -> float | None:
        """0 to send now, seconds to wait, or None to drop (nothing new to say)."""
        sent = self._sent.get(job_id)
        if sent is None:
            return 0.0
        previous = sent.status
        if status == previous:
            return None
        # A new place in line is news for whoever watches the queue: sent like a phase change (it
        # moves only when a job ahead is admitted or leaves, not every step).
        if (status.phase, status.stage, status.total, status.queue_position, status.queue_reason, status.placement) != (
            previous.phase,
            previous.stage,
            previous.total,
            previous.queue_position,
            previous.queue_reason,
            previous.placement,
        ):
            return 0.0
        steps = None if status.step is None or previous.step is None else abs(status.step - previous.step)
        if steps is not None and steps >= self.every_steps:
            return 0.0
        return max(0.0, sent.at_s + self.interval_s - now_s)

    def flush_once(self) -> float | None:
        """Send every pending status that is due; return seconds until the next held-back one."""
        now_s = self._monotonic()
        to_send: list[tuple[str, MirroredStatus]] = []
        next_due: float | None = None
        with self._lock:
            for job_id, status in list(self._pending.items()):
                wait_s = self._due_in_s(job_id, status, now_s)
                if wait_s is None:
                    del self._pending[job_id]
                elif wait_s <= 0:
                    del self._pending[job_id]
                    to_send.append((job_id, status))
                else:
                    next_due = wait_s if next_due is None else min(next_due, wait_s)
        for job_id, status in to_send:
            self._send(job_id, status, now_s)
        return next_due

    def _send(self, job_id: str, status: MirroredStatus, now_s: float) -> None:
        try:
            present = self._mirror.mirror_status(
                job_id,
                status.phase,
                status.stage,
                status.step,
                status.total,
                queue_position=status.queue_position,
                queue_reason=status.queue_reason,
                placement=status.placement,
            )
        except Exception as e:  # noqa: BLE001 - a label is a convenience: never fail or stall a job over it
            log.warning("could not mirror %s's status (%s) onto its workload: %s", job_id, status.phase, e)
            return  # not recorded as sent: the next offer tries again
        with self._lock:
            if status.terminal or not present:
                # Nothing more will be said about this job (or there is nothing left to label).
                self._sent.pop(job_id, None)
            else:
                self._sent[job_id] = _Sent(status, now_s)

    # -- the thread --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._loop is not None:
            return
        # A pass waits until an offer, a held-back status is due (what flush_once returns), or stop.
        self._loop = BackgroundLoop(
            "rljob-status-mirror", self.flush_once, interval_s=None, retry_s=self.interval_s, what="status mirror pass"
        )
        self._loop.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._loop is not None:
            self._loop.stop(timeout_s)
            self._loop = None
