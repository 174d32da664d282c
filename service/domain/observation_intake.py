"""Observations and trainer progress becoming job state: what the launchers' threads and the progress poller hand
the job service, carried out through the one write path (JobWriter.write_as_leader, job_writer.py), which the job
service holds too. The intake holds the writer and the ports it reads, never the service: what an observation asks
of the service afterwards (a relaunch, forgetting an ended job) is its answer, `Applied`, which the service acts on.

An observation is decided by observation_policy.decide(); a stopped workload's trainer events are drained first,
so its artifacts and its own account of the end are in the record before the terminal phase (nothing is folded in
after it). This process's memory of each job's attempts (the workloads a relaunch replaced, the requeue under way,
the newest observation applied) lives here, beside the code that reads it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from service.domain.cost.placement import kinds_left
from service.domain.evals.suite_versions import assign_suite_version
from service.domain.records.manifest_sizes import ManifestSizes
from service.domain.records.models import JobRecord, ManifestRefused
from service.domain.records.ports import Clock, JobLauncher, JobRequeue, JobStore, JobTx, Observation, ProgressSource, RunFiles, SkippedLine
from trainer.contract import ExitCode, TrainerEvent

from .fold_pacer import FOLD_CHUNK_EVENTS, FoldPacer
from .job_writer import JobWriter
from .observation_policy import (
    WORKLOAD_STOPPED,
    Decision,
    ObservationOrder,
    decide,
    leaves_stranded,
    names_a_replaced_workload,
    requeues_on_disruption,
)
from .progress import fold_events, note_skipped_lines
from .record_writes import write_decision

log = logging.getLogger(__name__)

MAX_DRAIN_READS = 1024  # x MAX_READ_BYTES of the events reader (256 MiB): a drain is bounded, the poller does the rest
# A stopped workload's events are drained before its end is written, for at most DRAIN_BUDGET_S of one observation's
# time (the observation thread applies every job's); a job still behind keeps its phase, the poller reads on at its
# pace, and the reconcile's next look writes the end, at most DRAIN_PUT_OFF_MAX_S after the first try.
DRAIN_BUDGET_S = 5.0
DRAIN_PUT_OFF_MAX_S = 600.0


@dataclass(frozen=True)
class Applied:
    """What applying an observation asks of the job service afterwards, in this order: launch the job again
    (`relaunch`: a resume, a hung restart or a relaunch after a requeue), then, if the job has ended by then, forget
    this process's memory of it (`JobService.apply_observation`, then `ObservationIntake.forget_if_ended`).
    `put_off`: the job's end waits for its unread events; nothing follows."""

    relaunch: bool = False
    put_off: bool = False


PUT_OFF = Applied(put_off=True)


class ObservationIntake:
    def __init__(
        self,
        writer: JobWriter,
        *,
        store: JobStore,
        launcher: JobLauncher,
        progress: ProgressSource,
        run_files: RunFiles | None,
        fold_pacer: FoldPacer,
        clock: Clock,
        max_resumes: int,
        max_hung_restarts: int,
    ) -> None:
        self.writer = writer
        self.store = store
        self.launcher = launcher
        self.progress = progress
        self.run_files = run_files
        self.fold_pacer = fold_pacer
        self.clock = clock
        self.max_resumes = max_resumes
        self.max_hung_restarts = max_hung_restarts
        self._replaced: dict[str, set[str]] = {}  # job id -> workload names a relaunch replaced
        self._requeueing: set[str] = set()  # job ids whose workload this service is giving back to its queue
        self._end_put_off_since: dict[str, float] = {}  # job id -> monotonic time its end was first put off
        self._observed = ObservationOrder()

    def ingest_progress(self, job_id: str, *, until_caught_up: bool = False) -> bool:
        """Fold new trainer events into the job; True when the source had more than one read held.
        A batch's read position is committed only after all of it was folded: a failed fold is read
        again next time (events already folded are dropped by seq). A batch is folded in chunks at the
        pacer's share of the CPU (fold_pacer.py). `until_caught_up` keeps reading (bounded) while the
        source has more, as before a terminal phase, after which nothing is folded in."""
        deadline = time.monotonic() + DRAIN_BUDGET_S
        for read in range(MAX_DRAIN_READS if until_caught_up else 1):
            if read and time.monotonic() > deadline:
                return True  # the caller decides: apply_observation puts the job's end off
            record = self.store.get(job_id)
            if record is None or record.phase.is_terminal():
                return False
            batch = self.progress.read_new(record)
            chunks = [batch.events[i : i + FOLD_CHUNK_EVENTS] for i in range(0, len(batch.events), FOLD_CHUNK_EVENTS)]
            skipped = batch.skipped
            for chunk in chunks or ([[]] if skipped else []):
                with self.fold_pacer.fold():
                    self.writer.write_as_leader(job_id, functools.partial(self._fold, events=chunk, skipped=skipped))
                skipped = ()  # said once, with the first chunk
            self.progress.commit(batch)
            if not batch.more:
                return False
        if until_caught_up:
            log.warning("job %s: events still unread after %d reads; the poller continues", job_id, MAX_DRAIN_READS)
        return True

    def _fold(self, rec: JobRecord, tx: JobTx, *, events: list[TrainerEvent], skipped: Sequence[SkippedLine]) -> None:
        if rec.phase.is_terminal():
            return  # late events never touch a finished job
        eval_report_before = rec.report.eval_report
        changes = fold_events(rec, events)
        changes.log.extend(note_skipped_lines(rec, skipped).log)
        now = self.clock()
        assign_suite_version(rec, tx, now, folded_before=eval_report_before)  # an eval job's new report: its suite's version
        tx.add_metric_points(rec.id, changes.points)
        tx.append_events(rec, changes.log, now)

    def apply_observation(self, obs: Observation) -> Applied:
        """Turn what the backend says into a transition; the only place observations become phases.
        The policy is observation_policy.decide(); this carries its decision out, and answers what the job
        service does next (Applied)."""
        if obs.state in WORKLOAD_STOPPED:
            # Drain the events file first so artifacts and the RunFinished message are in the record
            # before the terminal phase is written (nothing may be folded in after it).
            behind = False
            try:
                behind = self.ingest_progress(obs.job_id, until_caught_up=True)
            except Exception:
                log.exception("reading progress of %s failed", obs.job_id)
            if behind and self._put_end_off(obs.job_id):
                return PUT_OFF
        manifest = self._read_manifest_if_ending(obs)
        decided = Decision.IGNORE

        def apply(rec: JobRecord, tx: JobTx) -> None:
            nonlocal decided
            if self._observed.is_older(obs):
                log.info("ignoring %s for %s: observed before the last observation applied", obs.state, rec.id)
                return
            self._observed.applied(obs)
            decided = self._decide(rec, obs)
            if decided is Decision.STALE:
                log.info("ignoring %s for %s: %s was replaced by a relaunch", obs.state, rec.id, obs.object_name)
            replaced = write_decision(decided, rec, tx, obs, manifest, self.clock, self.max_hung_restarts)
            if replaced is not None:
                self._replaced.setdefault(rec.id, set()).add(replaced)
            if decided is Decision.REQUEUE:
                # Marked under the lock: another thread's RESTARTING about the same attempt is a NOTE, not a
                # second requeue that could delete the workload the relaunch made.
                self._requeueing.add(rec.id)

        self.writer.write_as_leader(obs.job_id, apply)
        if decided is Decision.REQUEUE and isinstance(self.launcher, JobRequeue):
            self.launcher.requeue(obs.job_id)
        if decided.relaunches:
            self._requeueing.discard(obs.job_id)
        return Applied(relaunch=decided.relaunches)

    def forget_if_ended(self, job_id: str) -> bool:
        """Whether the job has ended (read after the service acted on `Applied`); if so, this process's memory of its
        attempts and its events' read position are dropped."""
        record = self.store.get(job_id)
        if record is None or not record.phase.is_terminal():
            return False
        self.progress.forget(job_id)
        self._replaced.pop(job_id, None)
        self._observed.forget(job_id)
        self._end_put_off_since.pop(job_id, None)
        self._requeueing.discard(job_id)
        return True

    def _put_end_off(self, job_id: str) -> bool:
        """Whether a stopped job with events still unread keeps its phase for now (DRAIN_PUT_OFF_MAX_S)."""
        now = time.monotonic()
        since = self._end_put_off_since.setdefault(job_id, now)
        if now - since < DRAIN_PUT_OFF_MAX_S:
            if since == now:
                log.info("job %s: its workload stopped with trainer events still unread; its end is written once they are read", job_id)
            return True
        log.warning(
            "job %s: trainer events still unread %.0f s after its workload stopped; its end is written without them", job_id, now - since
        )
        return False

    def _decide(self, rec: JobRecord, obs: Observation) -> Decision:
        replaced = names_a_replaced_workload(obs.object_name, rec.object_name, self._replaced.get(rec.id, ()))
        resumes_left = rec.resumes < self.max_resumes
        return decide(
            rec.phase,
            obs.state,
            about_replaced_workload=replaced,
            resumes_left=resumes_left,
            requeue_disrupted=requeues_on_disruption(rec.hardware.capacities, obs, isinstance(self.launcher, JobRequeue)),
            requeueing=rec.id in self._requeueing,
            deleting=obs.reason == "Deleting",
            held=rec.hold is not None,
            hung=obs.exit_code == ExitCode.HUNG,
            hung_restarts_left=rec.report.hung_restarts < self.max_hung_restarts,
            leave_stranded=leaves_stranded(kinds_left(rec, obs.capacity), obs, isinstance(self.launcher, JobRequeue)),
        )

    def _read_manifest_if_ending(self, obs: Observation) -> ManifestSizes | ManifestRefused | None:
        """Read the run's manifest (storage I/O: before the write lock, never under it)."""
        if self.run_files is None:
            return None
        record = self.store.get(obs.job_id)
        if record is None or not self._decide(record, obs).records_artifacts:
            return None
        try:
            return self.run_files.read_manifest(record)
        except Exception:  # artifacts are worth showing, not worth failing to record the job's end
            log.exception("reading the manifest of %s failed", obs.job_id)
            return None
