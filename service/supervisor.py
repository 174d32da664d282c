"""The supervisor: the threads that feed launcher observations and trainer progress into the job service.

Threads (background loops, service/background_loop.py; all stopped by `Supervisor.stop()`):
- observations: drains the bounded queue the launcher pushes into and applies each observation;
- recovery: re-attaches every non-terminal job (recovery.py; retried with backoff), then marks the service ready;
  from then on the same thread, every progress_poll_interval_s, folds new trainer events into active jobs whose
  events grew and re-judges running jobs' learning health when time may have changed it (a job stalls without
  any event saying so; progress_poller.py), carries out what other replicas stored (request_take_over.py: a job
  they accepted, a cancel they recorded), and every active_jobs_reconcile_interval_s asks the launcher about every
  active job (active_jobs_reconciler.py: catches missed observations). One thread for all of these on purpose:
  the poll and the reconcile both fold a job's events, the take-over and the reconcile both launch and stop jobs,
  and none of them may run before recovery has succeeded;
- the leader's rounds (service/leader_rounds.py), one list, each restarted and started at every term and all
  stopped at its end: the attached evals (once recovery has succeeded, every progress_poll_interval_s: the eval
  jobs that training jobs with `eval` set should have, attached_eval_reconciler.py; a comparison's bootstrap takes
  seconds), checkpoint expiry (once recovered, every CHECKPOINT_EXPIRY_INTERVAL_S: finished runs' expired
  intermediate checkpoints, checkpoint_expiry.py; deleting a large checkpoint takes a while), budgets (once
  recovered, every budget_check_interval_s: hold or release the TPU jobs of a team over or under its budget,
  budget_reconciler.py), and what the runtime adds: the MLflow export and the webhook queueing and sending rounds.
  Each reconciler works from what is stored, so a restart finishes what a killed leader started.

Only the leading replica runs a supervisor (service/leadership.py); it is started again when this
replica takes the lead again after losing it. It is given the job service and the ports, policies and clock that
service was built from, and hands each round the ones it uses: a round reads the store or asks the launcher itself,
and calls the job service only for what the service does (launch, stop a workload, apply an observation, write).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

from service.background_loop import BackgroundLoop
from service.domain.job_service import JobService
from service.domain.job_service_parts import DEFAULT_POLICIES, JobPolicies, JobPorts
from service.domain.records.ports import Clock, Observation, utc_now
from service.domain.rounds.active_jobs_reconciler import ActiveJobsReconciler
from service.domain.rounds.attached_eval_reconciler import AttachedEvalReconciler
from service.domain.rounds.budget_reconciler import BudgetReconciler
from service.domain.rounds.checkpoint_expiry import CheckpointExpiryReconciler, CheckpointStore
from service.domain.rounds.progress_poller import ProgressPoller
from service.domain.rounds.recovery import JobRecovery
from service.domain.rounds.request_take_over import RequestTakeOver
from service.fault_log import FaultLog
from service.leader_rounds import LeaderRound, RoundLoops, RoundOf

log = logging.getLogger(__name__)

OBSERVATION_QUEUE_SIZE = 10_000
OBSERVATION_WAIT_S = 0.2  # how long the observation loop waits for one before it checks for a stop
CHECKPOINT_EXPIRY_INTERVAL_S = 60.0  # retention is counted in days: a minute late is nothing


class Supervisor:
    def __init__(
        self,
        jobs: JobService,
        ports: JobPorts,
        policies: JobPolicies = DEFAULT_POLICIES,
        *,
        clock: Clock = utc_now,
        progress_poll_interval_s: float,
        active_jobs_reconcile_interval_s: float,
        recovery_retry_s: float = 1.0,
        recovery_retry_max_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
        take_over_requests: bool = False,
        checkpoints: CheckpointStore | None = None,
        checkpoint_retention_days: int = 30,
        budget_check_interval_s: float = 30.0,
        rounds: Sequence[LeaderRound] = (),
    ) -> None:
        # `ports`, `policies` and `clock`: those `jobs` was built from (runtime.py passes the same to both).
        store = ports.store
        self.jobs = jobs
        self.launcher = ports.launcher
        self.recovery = JobRecovery(jobs, store, ports.launcher)
        self.request_take_over = RequestTakeOver(jobs, store)
        self.active_jobs = ActiveJobsReconciler(jobs, store, ports.launcher, clock=clock)
        self.progress_poller = ProgressPoller(jobs, store, ports.progress, clock=clock, health_policy=policies.health)
        self.attached_evals = AttachedEvalReconciler(jobs, store, ports.run_files, clock=clock)
        self.budgets = BudgetReconciler(jobs, store, policies.budget_ledger(store), clock=clock)
        self.budget_check_interval_s = budget_check_interval_s
        # None: no checkpoint is ever deleted (tests that do not exercise retention)
        self.checkpoint_expiry = (
            CheckpointExpiryReconciler(
                jobs, store, checkpoints, clock=clock, location_policy=policies.location, default_days=checkpoint_retention_days
            )
            if checkpoints is not None
            else None
        )
        self.progress_poll_interval_s = progress_poll_interval_s
        self.active_jobs_reconcile_interval_s = active_jobs_reconcile_interval_s
        self.recovery_retry_s = recovery_retry_s  # doubled after each failed recovery, up to the max
        self.recovery_retry_max_s = recovery_retry_max_s
        self._monotonic = monotonic
        self.take_over_requests = take_over_requests  # True where other replicas store jobs and cancels
        # None wakes the observation loop at stop (see stop()); launchers only ever put observations.
        self._observations: queue.Queue[Observation | None] = queue.Queue(maxsize=OBSERVATION_QUEUE_SIZE)
        self.ready = threading.Event()
        self.recovery_error: str | None = None
        self._loops: list[BackgroundLoop] = []
        # Every piece of leader work beyond observations and recovery, as one list: started at each term, all stopped.
        self.rounds = RoundLoops([*self._domain_rounds(), *rounds])
        self._recovery_delay_s = recovery_retry_s
        self._recovered = False  # this start's recovery has succeeded: poll from now on
        self._faults = FaultLog(log)  # the progress round's faults, each logged once until it recovers
        self._next_reconcile_s = 0.0

    def sink(self, obs: Observation) -> None:
        """Called from launcher threads; never blocks them."""
        try:
            self._observations.put_nowait(obs)
        except queue.Full:
            log.warning("observation queue full; dropping %s for %s (the reconcile loop catches up)", obs.state, obs.job_id)

    def _domain_rounds(self) -> list[LeaderRound]:
        """The leader's reconcilers, each run only once recovery has succeeded (jobs re-attached, a held job's
        workload looked at, submissions accepted)."""
        made: list[LeaderRound] = [
            RoundOf(
                "rljob-attached-evals",
                "making and showing attached evaluations",
                self.progress_poll_interval_s,
                self._after_recovery(self.attached_evals.reconcile_once),
                on_restart=self.attached_evals.restart,
            ),
            RoundOf(
                "rljob-budgets",
                "enforcing team budgets",
                self.budget_check_interval_s,
                self._after_recovery(self.budgets.reconcile_once),
                on_restart=self.budgets.restart,
            ),
        ]
        if self.checkpoint_expiry is not None:
            made.append(
                RoundOf(
                    "rljob-checkpoint-expiry",
                    "deleting finished runs' expired checkpoints",
                    CHECKPOINT_EXPIRY_INTERVAL_S,
                    self._after_recovery(self.checkpoint_expiry.reconcile_once),
                    on_restart=self.checkpoint_expiry.restart,
                )
            )
        return made

    def _after_recovery(self, reconcile: Callable[[], object]) -> Callable[[], None]:
        def one_round() -> None:
            if self.ready.is_set():
                reconcile()

        return one_round

    def start_term(self, term: int) -> None:
        """This replica leads, in `term`: its writes carry the term, then every piece of leader work starts."""
        self.jobs.begin_term(term)
        self.start()

    def end_term(self) -> None:
        """This replica no longer leads: first refuse its writes (one under way is fenced), then stop everything."""
        self.jobs.end_term()
        self.stop()

    def start(self) -> None:
        self.ready.clear()
        self.recovery_error = None
        self._recovery_delay_s = self.recovery_retry_s
        self._recovered = False
        self.jobs.start()
        self.launcher.start(self.sink)
        self._loops = [
            # No wait between rounds: a round waits on the queue itself (0.2 s, so a stop is seen soon).
            BackgroundLoop("rljob-observations", self._apply_next_observation, interval_s=0, what="applying an observation"),
            BackgroundLoop(
                "rljob-recovery",
                self._recover_or_poll,
                interval_s=self.progress_poll_interval_s,
                what="recovery or progress polling",
            ),
        ]
        for loop in self._loops:
            loop.start()
        self.rounds.start()  # each restarted first: a new term looks at everything again

    def stop(self) -> None:
        for loop in self._loops:
            loop.request_stop()
        # The observation loop blocks in the queue's get, which a stop request does not interrupt: every service
        # stop (and every test's app) waited out its timeout.
        with contextlib.suppress(queue.Full):  # a full queue returns from get at once anyway
            self._observations.put_nowait(None)
        self.rounds.stop()
        self.launcher.stop()
        for loop in self._loops:
            loop.join(timeout_s=10)
        self._loops = []
        self.jobs.stop()  # after the observation threads: nothing offers new statuses any more

    def _apply_next_observation(self) -> float:
        try:
            obs = self._observations.get(timeout=OBSERVATION_WAIT_S)
        except queue.Empty:
            return 0.0
        if obs is None:  # stop() woke us
            return 0.0
        try:
            self.jobs.apply_observation(obs)
        except Exception:
            log.exception("applying %s for %s failed", obs.state, obs.job_id)
        return 0.0

    def _recover_or_poll(self) -> float | None:
        """Until recovery has succeeded once, try it (backing off); then poll every progress_poll_interval_s."""
        if self._recovered:
            behind = self._poll_round()
            return 0.0 if behind else None  # a job's events are left over: the pacer sets the pace, not the interval
        try:
            self.recovery.recover()
        except Exception as e:  # e.g. the database went away: stay not-ready, say why, try again
            delay_s = self._recovery_delay_s
            log.exception("recovery failed; retrying in %.1fs", delay_s)
            self.recovery_error = f"{e} (retrying)"
            self._recovery_delay_s = min(delay_s * 2, self.recovery_retry_max_s)
            return delay_s
        self.recovery_error = None
        self._recovered = True
        self.ready.set()
        log.info("recovery finished; accepting submissions")
        self._next_reconcile_s = self._monotonic() + self.active_jobs_reconcile_interval_s
        return None

    def _poll_round(self) -> bool:
        # Polling and the reconcile are guarded apart: one failing must not hold the other back.
        # Each logged once per fault and once when it recovers (fault_log.py): a full state disk fails every round.
        behind = False
        try:
            behind = self.poll_progress_once()
            if self.take_over_requests:
                self.request_take_over.take_over_requests()
        except Exception as e:  # noqa: BLE001 - logged, with its traceback, by FaultLog
            self._faults.failed("poll", e, "polling progress failed; trying again every %.1fs", self.progress_poll_interval_s)
        else:
            self._faults.succeeded("poll", "polling progress works again")
        if self._monotonic() >= self._next_reconcile_s:
            self._next_reconcile_s = self._monotonic() + self.active_jobs_reconcile_interval_s
            try:
                self.active_jobs.reconcile_once()
            except Exception as e:  # noqa: BLE001 - logged, with its traceback, by FaultLog
                self._faults.failed("reconcile", e, "reconcile failed; trying again every %.1fs", self.active_jobs_reconcile_interval_s)
            else:
                self._faults.succeeded("reconcile", "the reconcile works again")
        return behind

    def poll_progress_once(self) -> bool:
        """Fold new trainer events into jobs whose events grew, and re-judge health when time may
        have changed it; jobs where neither happened cost a dict lookup and a stat (progress_poller.py).
        True when a job has more events than one read held."""
        return self.progress_poller.poll_once()
