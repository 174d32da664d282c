"""JobService: the only writer of job state.

A new job is inserted by `submit`; every later change goes through the one write path, JobWriter (job_writer.py),
which takes this process's write lock, re-reads the record inside a store transaction (SELECT ... FOR UPDATE on
PostgreSQL), applies the change (phases through `transition()`, record_writes.py), appends to the job's event log and
commits. Re-reading first is what keeps a late observation or a duplicate progress event from undoing a terminal
phase. What an observation does is decided by observation_policy.decide() and carried out by the observation intake
(observation_intake.py), which holds the same writer, not this service: it answers what the service does next.

The write lock serialises this process's writes; across replicas on one PostgreSQL database the row
lock orders writes to a job and an event-order lock makes event seqs visible in commit order
(sql_store.py), so an SSE reader that saw seq N never later misses a seq below N. Writes of the
leader's work also check its leadership term in their transaction (`as_leader`, service/leadership.py).

Every write also re-judges the job's learning health and logs a `health` entry
when the verdict changed (job_health.py), so SSE streams carry it.

After a commit that changed a job with a workload (outside the lock), a launcher that can mirror
status (`StatusMirror`) is offered the new phase/stage/progress; status_mirror.py throttles and
sends it from its own thread.

The constructor takes its parts grouped (job_service_parts.py): the ports (JobPorts), the policies (JobPolicies), how this replica writes
(WriteRules: leadership, fencing, an API write's wait) and the pacing of the mirror and the folds (Pacing).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import string
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from service.domain.cost.estimate_source import SubmitEstimator
from service.domain.cost.placement import launch_spec
from service.domain.health.job_health import health_verdict_changed
from service.domain.records.attached_eval_models import AttachedEvalPublic
from service.domain.records.errors import IdempotencyKeyTaken, JobNotFound, LeaderFenced, NotCancellable
from service.domain.records.estimate_models import JobEstimate
from service.domain.records.models import Caller, JobFilters, JobRecord, SamplesPublic
from service.domain.records.phases import CANCELLABLE, JobPhase
from service.domain.records.ports import (
    Clock,
    JobTx,
    Observation,
    StatusMirror,
    utc_now,
)
from trainer.contract import JobSpec

from .fold_pacer import FoldPacer
from .job_logs import job_log_lines
from .job_samples import read_job_samples
from .job_service_parts import DEFAULT_PACING, DEFAULT_POLICIES, JobPolicies, JobPorts, Pacing
from .job_writer import JobWriter, WriteRules
from .observation_intake import ObservationIntake
from .record_writes import write_phase
from .status_mirror import StatusMirrorWorker
from .submission import check_submission, store_new_job
from .write_wait import held_within

log = logging.getLogger(__name__)

_ID_ALPHABET = string.ascii_lowercase + string.digits
LEADS_ALONE = WriteRules()  # leads always, nothing to fence, an API write waits as long as it takes


def new_job_id() -> str:
    """`rl-` + 12 random lowercase letters/digits: DNS-safe, usable as a Kubernetes object name."""
    return "rl-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


class JobService:
    def __init__(
        self,
        ports: JobPorts,
        policies: JobPolicies = DEFAULT_POLICIES,
        *,
        writes: WriteRules = LEADS_ALONE,
        pacing: Pacing = DEFAULT_PACING,
        clock: Clock = utc_now,
        notify: Callable[[], None] = lambda: None,
        id_factory: Callable[[], str] = new_job_id,
    ) -> None:
        store, launcher = ports.store, ports.launcher
        self.store = store
        self.budgets = policies.budget_ledger(store)  # team budgets (budget_ledger.py)
        self.estimator = SubmitEstimator(store, launcher, policies.prices, clock)  # the estimate at submit (estimates.py)
        self.fold_pacer = pacing.fold_pacer or FoldPacer(1.0)  # 1.0: no rest, folds still in chunks
        self.launcher = launcher
        self.progress = ports.progress
        self.run_files = ports.run_files
        # Decided once: only launchers with somewhere to write status (Kubernetes) get a mirror.
        self.status_mirror = (
            StatusMirrorWorker(launcher, every_steps=pacing.mirror_every_steps, interval_s=pacing.mirror_interval_s)
            if isinstance(launcher, StatusMirror)
            else None
        )
        self.clock = clock
        self._notify = notify
        self.max_resumes = policies.max_resumes
        self.max_hung_restarts = policies.max_hung_restarts  # restarts after the trainer's watchdog found it hung (hangs.py)
        self._new_id = id_factory
        self.health_policy = policies.health
        self.location_policy = policies.location
        # The one write path (job_writer.py), with this replica's leadership and fencing; the intake holds it too.
        self.writer = JobWriter(
            store, clock=clock, health_policy=policies.health, rules=writes, notify=notify, status_mirror=self.status_mirror
        )
        self._lock = self.writer.lock
        self.request_write_wait_s = writes.request_write_wait_s  # the API's writes give up after this (write_wait.py)
        self._launching: set[str] = set()  # launch() under way in this process
        self._stop_requested: set[str] = set()  # cancels sent to the launcher by this process
        self.intake = ObservationIntake(  # observations and trainer events becoming job state
            self.writer,
            store=store,
            launcher=launcher,
            progress=self.progress,
            run_files=self.run_files,
            fold_pacer=self.fold_pacer,
            clock=clock,
            max_resumes=self.max_resumes,
            max_hung_restarts=self.max_hung_restarts,
        )

    def leads(self) -> bool:
        """Whether this replica leads now (service/leadership.py): only the leader talks to the launcher; another
        replica stores the job or the cancel, and the leader's take-over carries it out."""
        return self.writer.leads()

    def begin_term(self, term: int) -> None:
        """This replica leads for `term`: its leader writes carry it from now on."""
        self.writer.begin_term(term)

    def end_term(self) -> None:
        """This replica no longer leads: a leader write still under way here is refused."""
        self.writer.end_term()

    def start(self) -> None:
        """Start background helpers (the status mirror); the supervisor calls this at start-up (and
        when this replica takes the lead again: cancels sent in an earlier term are sent again)."""
        self._stop_requested.clear()
        if self.status_mirror is not None:
            self.status_mirror.start()

    def stop(self) -> None:
        if self.status_mirror is not None:
            self.status_mirror.stop()

    # ---- reads -------------------------------------------------------------------------------

    def get(self, caller: Caller, job_id: str) -> JobRecord:
        record = self.store.get(job_id)
        if record is None or not caller.can_see(record.team):
            raise JobNotFound(job_id)  # another team's job looks exactly like a missing one
        return record

    def list_jobs(
        self, caller: Caller, filters: JobFilters, *, before_pk: int | None, limit: int
    ) -> tuple[list[tuple[int, JobRecord]], bool]:
        """A page of the jobs the caller may see, newest first, as (pk, record) pairs for a cursor,
        and whether older ones follow. Only admins see other teams: for anyone else a filter on
        another team finds nothing, exactly as if that team had no jobs."""
        visible = self.visible_filters(caller, filters)
        if visible is None:
            return [], False
        rows = self.store.list_jobs(visible, before_pk=before_pk, limit=limit + 1)
        return rows[:limit], len(rows) > limit

    @staticmethod
    def visible_filters(caller: Caller, filters: JobFilters) -> JobFilters | None:
        """The filters narrowed to what the caller may see; None: nothing. Only admins see other teams:
        for anyone else a filter on another team finds nothing, exactly as if that team had no jobs."""
        if caller.admin:
            return filters
        if filters.team is not None and filters.team != caller.team:
            return None
        return dataclasses.replace(filters, team=caller.team)

    def logs(self, record: JobRecord, *, follow: bool = False, tail_lines: int | None = None) -> Iterator[str | None]:
        """The workload's log while the backend has it, else the stage logs in the run directory."""
        return job_log_lines(self.launcher, self.run_files, record, follow=follow, tail_lines=tail_lines)

    def samples(self, record: JobRecord, step: int | None = None) -> SamplesPublic:
        """A train step's completions and rewards from the run directory (the newest without `step`)."""
        return read_job_samples(self.run_files, record, step)

    # ---- commands from the API ---------------------------------------------------------------

    def submit(
        self, caller: Caller, spec: JobSpec, idempotency_key: str | None = None, *, override_budget: bool = False
    ) -> tuple[JobRecord, bool]:
        """Store a new job and hand it to the launcher. Returns (record, created).

        A job whose estimated memory per chip exceeds its accelerator's is refused here, before any
        TPU is asked for (trainer/sizing/fit.py); the estimate is stored with the job either way."""
        spec, fit = check_submission(spec, caller, self.location_policy, self.launcher)  # InvalidRequest: nothing stored
        estimate = self.estimator.estimate(caller, spec)
        # Its team's budget (422 naming it), checked in the insert's transaction after the team's admission lock
        # (submission.py), under this process's write lock like every write: on SQLite the admission lock is the
        # database's write lock, which every write here takes after this one (the other order could deadlock); on
        # PostgreSQL a replica's submissions then wait here, not each holding a connection while it waits.
        admit = self.budgets.admission(caller, spec, estimate, self.clock, override=override_budget)

        claimed: list[str] = []

        def store_new() -> tuple[JobRecord, bool]:
            with held_within(self._lock, self.request_write_wait_s) as wait_s:
                job_id, now = self._new_id(), self.clock()
                # Claimed before the insert commits: a take-over round (rounds/request_take_over.py) that reads the stored
                # QUEUED job before this submission's launch below leaves it to that launch, instead of launching it
                # too (the launch after it found the job LAUNCHING and handed it to the launcher a second time).
                self._launching.add(job_id)
                claimed.append(job_id)
                return store_new_job(
                    self.store, caller, spec, idempotency_key, fit, job_id=job_id, now=now, estimate=estimate, admit=admit, wait_s=wait_s
                )

        try:
            try:
                record, created = store_new()
            except IdempotencyKeyTaken:  # another replica stored it after this one looked: answer with that job
                record, created = store_new()
            if not created:
                return record, False
            self._notify()
            if self.leads():
                try:
                    self.launch(record.id)
                except LeaderFenced:  # stored: the replica that leads now hands it over (its take-over)
                    log.info("%s is stored; this replica stopped leading before launching it", record.id)
            return self.store.get(record.id) or record, True
        finally:
            self._launching.difference_update(claimed)

    def estimate(self, caller: Caller, spec: JobSpec) -> JobEstimate:
        """What `spec` would take, checked as a submit is (InvalidRequest alike); nothing is stored."""
        spec, _ = check_submission(spec, caller, self.location_policy, self.launcher)
        return self.estimator.estimate(caller, spec)

    def cancel(self, caller: Caller, job_id: str) -> JobRecord:
        record = self.get(caller, job_id)
        if record.phase is JobPhase.CANCELLING:
            return record  # idempotent: the first cancel is still being carried out
        if record.phase not in CANCELLABLE:
            raise NotCancellable(job_id, record.phase.value)

        def request_cancel(rec: JobRecord, tx: JobTx) -> None:
            if rec.phase is JobPhase.QUEUED and not rec.handed_over:
                write_phase(tx, rec, JobPhase.CANCELLED, "cancelled before it was launched", self.clock)
            elif rec.phase in CANCELLABLE:
                write_phase(tx, rec, JobPhase.CANCELLING, "cancel requested; stopping the workload", self.clock)
            elif rec.phase is not JobPhase.CANCELLING:
                # It ended between the read above and this write: the answer must say so (409), not 200.
                raise NotCancellable(job_id, rec.phase.value)

        record = self.writer.write_for_request(job_id, request_cancel)  # any replica
        if record.phase is JobPhase.CANCELLING and self.leads():
            self.stop_workload(job_id)
        return self.store.get(job_id) or record

    # ---- launching ---------------------------------------------------------------------------

    def is_launching(self, job_id: str) -> bool:
        return job_id in self._launching

    def stop_requested(self, job_id: str) -> bool:
        return job_id in self._stop_requested

    def launch(self, job_id: str) -> None:
        """Hand a QUEUED (or resumed LAUNCHING) job to the launcher; idempotent per job id."""
        self._launching.add(job_id)
        try:
            self._launch(job_id)
        finally:
            self._launching.discard(job_id)

    def _launch(self, job_id: str) -> None:

        def mark_launching(rec: JobRecord, tx: JobTx) -> None:
            if rec.phase is JobPhase.QUEUED and rec.hold is None:  # a job its budget holds waits for the budget loop
                message = f"handing the job to the {self.launcher.backend} launcher"
                write_phase(tx, rec, JobPhase.LAUNCHING, message, self.clock)

        record = self._mutate(job_id, mark_launching)
        if record.phase is not JobPhase.LAUNCHING:
            return  # cancelled (or finished) meanwhile: launching now would start an orphan
        try:
            result = self.launcher.launch(job_id, launch_spec(record))
        except Exception as e:  # noqa: BLE001 - any adapter error ends the job with the reason, never a stuck LAUNCHING
            log.warning("launch of %s failed: %s", job_id, e)
            cause = str(e)  # bound here: the except block unbinds `e` when it ends

            def mark_failed(rec: JobRecord, tx: JobTx) -> None:
                if rec.phase is JobPhase.LAUNCHING:  # not cancelled meanwhile
                    rec.failure_reason = "LaunchFailed"
                    message = (
                        f"the {self.launcher.backend} launcher could not start the job: {cause}; fix the cause and submit the job again"
                    )
                    write_phase(tx, rec, JobPhase.FAILED, message, self.clock)

            self._mutate(job_id, mark_failed)
            return

        def record_launch(rec: JobRecord, tx: JobTx) -> None:
            rec.backend = result.backend
            if rec.object_name is None:  # a RUNNING observation may already have named the process
                rec.object_name = result.object_name

        record = self._mutate(job_id, record_launch)
        if record.phase is JobPhase.CANCELLING:
            self.stop_workload(job_id)  # a cancel that raced with the launch call found nothing to stop

    def stop_workload(self, job_id: str) -> None:
        """Ask the launcher to stop the job's workload; a failure is logged, and the reconcile asks again."""
        self._stop_requested.add(job_id)
        try:
            self.launcher.cancel(job_id)
        except Exception:  # the slow reconcile sends the cancel again
            log.exception("cancel of %s failed; will retry on reconcile", job_id)

    def write_as_leader(self, job_id: str, change: Callable[[JobRecord, JobTx], Any]) -> JobRecord:
        """A change of the leader's own work written by its module (budget_reconciler.py, checkpoint_expiry.py)
        through the one write path (the intake holds the writer itself)."""
        return self.writer.write_as_leader(job_id, change)

    def post_message(self, job_id: str, message: str) -> None:
        """Show `message` on a job that has not ended, and log it in the job's event log."""

        def post(rec: JobRecord, tx: JobTx) -> None:
            if not rec.phase.is_terminal():
                rec.message = message
                tx.append_event(rec, "message", {"message": message}, self.clock())

        self._mutate(job_id, post)

    def record_attached_evals(self, job_id: str, evals: Sequence[AttachedEvalPublic]) -> None:
        """Store the job's view of the eval jobs attached to it (attached_eval_reconciler.py), ended or not: they
        outlive it. Logged as an `evals` entry (label, eval job, phase), so streams see it change."""

        def store(rec: JobRecord, tx: JobTx) -> None:
            if rec.report.attached_evals != list(evals):
                rec.report = dataclasses.replace(rec.report, attached_evals=list(evals))
                listed = [{"label": e.label, "eval_id": e.eval_id, "phase": e.phase.value if e.phase else None} for e in evals]
                tx.append_event(rec, "evals", {"evals": listed}, self.clock())

        self._mutate(job_id, store)

    def refresh_health(self, job_id: str) -> None:
        """Re-judge a job's health now: a running job becomes (or stops being) stalled by time
        passing, with no write to trigger it. Writes only on a change."""
        record = self.store.get(job_id)
        if record is not None:
            self.judge_health(record)

    def judge_health(self, record: JobRecord) -> None:
        """refresh_health for a record the caller has just read (the progress poller's): no read
        unless the verdict changed, and then the write path re-reads and re-judges under the lock."""
        if not record.phase.is_terminal() and health_verdict_changed(record, self.clock(), self.health_policy):
            self._mutate(record.id, lambda rec, tx: None)

    # ---- observations and progress (from launcher threads and the progress poller): observation_intake.py ----

    def ingest_progress(self, job_id: str, *, until_caught_up: bool = False) -> bool:
        """Fold new trainer events into the job (ObservationIntake.ingest_progress)."""
        return self.intake.ingest_progress(job_id, until_caught_up=until_caught_up)

    def apply_observation(self, obs: Observation) -> None:
        """Turn what the backend says into a transition (ObservationIntake.apply_observation), then do what it
        answers: launch the job again, and once it has ended, forget this process's memory of it."""
        applied = self.intake.apply_observation(obs)
        if applied.put_off:
            return
        if applied.relaunch:
            self.launch(obs.job_id)
        if self.intake.forget_if_ended(obs.job_id):
            self.forget_ended(obs.job_id)

    def forget_ended(self, job_id: str) -> None:
        """The job has ended: this process's memory of its cancel is dropped."""
        self._stop_requested.discard(job_id)

    # ---- the write path: job_writer.py -----------------------------------------------------------

    def _mutate(
        self, job_id: str, change: Callable[[JobRecord, JobTx], Any], *, as_leader: bool = True, wait_s: float | None = None
    ) -> JobRecord:
        """The one write path (JobWriter.write)."""
        return self.writer.write(job_id, change, as_leader=as_leader, wait_s=wait_s)
