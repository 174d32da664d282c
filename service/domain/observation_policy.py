"""What an observation does to a job: one pure decision per (phase, observed state), and the words
stored with it.

`decide()` is the whole policy; JobService.apply_observation re-reads the record under its write
lock, asks `decide()` and carries the decision out. Nothing here reads a store or a clock, so the
policy is tested as a table over every JobPhase x ObservedState (tests/service/domain/test_observation_policy.py).
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from service.domain.records.phases import JobPhase
from service.domain.records.ports import STRANDED_REASON, Observation, ObservedState
from service.domain.records.run_report import RunOutcome
from trainer.contract import ExitCode, describe_exit_code

# The backend says the workload is no longer running: its events file is drained before deciding.
WORKLOAD_STOPPED: frozenset[ObservedState] = frozenset({ObservedState.SUCCEEDED, ObservedState.FAILED, ObservedState.GONE})


class Decision(enum.StrEnum):
    IGNORE = "ignore"  # the job has ended: nothing may change it
    STALE = "stale"  # a GONE about a workload a relaunch replaced says nothing about the current one
    WAIT = "wait"  # nothing to do yet (CANCELLING: still stopping)
    NOTE = "note"  # the phase stands; a new message (and, QUEUED, the queue's reason and position) is shown
    QUEUE = "queue"  # LAUNCHING/RUNNING -> QUEUED: the backend's queue holds it (not admitted, or preempted)
    ADMIT = "admit"  # QUEUED -> LAUNCHING: the backend's queue admitted it
    START = "start"  # LAUNCHING/QUEUED -> RUNNING
    SUCCEED = "succeed"  # -> SUCCEEDED with the exit code (0 if none)
    FAIL = "fail"  # -> FAILED, the reason from the backend or the exit code
    FINISH_CANCEL = "finish_cancel"  # CANCELLING -> CANCELLED: the workload has stopped
    RELAUNCH = "relaunch"  # LAUNCHING and GONE: it never started, launch it again (no resume spent)
    RESUME = "resume"  # RUNNING and GONE: LAUNCHING again, one resume spent; stages already done are reused
    GIVE_UP = "give_up"  # RUNNING and GONE with no resume left: FAILED (ResumeLimit)
    # A job of several kinds of capacity whose attempt was disrupted (a Spot VM preempted): its workload goes
    # back to the queue (JobRequeue), so the pool places it again on any kind of its set, instead of retrying
    # in place on the kind it lost; the phase stands, and the GONE that follows resumes it.
    REQUEUE = "requeue"
    # A job its team's budget holds (JobRecord.hold, budget_reconciler.py) whose workload is seen stopped: QUEUED with
    # queue reason BudgetExhausted, no resume spent and no relaunch; the budget loop launches it when there is room.
    HOLD = "hold"
    # The trainer's watchdog found its attempt hung (exit ExitCode.HUNG: no progress event for longer than the job's
    # hang limit; its stacks are in the stage log): LAUNCHING again, one resume and one hung restart spent, so the rerun
    # resumes from the last checkpoint. Once RLJOB_MAX_HUNG_RESTARTS are spent, a hang is FAIL (reason HUNG).
    HUNG_RESTART = "hung_restart"

    @property
    def target(self) -> JobPhase | None:
        """The phase this decision writes; None keeps the phase."""
        return _TARGETS.get(self)

    @property
    def relaunches(self) -> bool:
        """The job service calls launch() again once the decision is committed."""
        return self in (Decision.RELAUNCH, Decision.RESUME, Decision.HUNG_RESTART)

    @property
    def records_artifacts(self) -> bool:
        """The workload exited and the job ends with it: the run's manifest is folded in first."""
        return self in (Decision.SUCCEED, Decision.FAIL, Decision.FINISH_CANCEL)

    @property
    def adopts_workload_name(self) -> bool:
        """The observation is about the job's current workload, so its name is the job's from now on."""
        return self not in (Decision.IGNORE, Decision.STALE)


_TARGETS: dict[Decision, JobPhase] = {
    Decision.QUEUE: JobPhase.QUEUED,
    Decision.ADMIT: JobPhase.LAUNCHING,
    Decision.START: JobPhase.RUNNING,
    Decision.SUCCEED: JobPhase.SUCCEEDED,
    Decision.FAIL: JobPhase.FAILED,
    Decision.FINISH_CANCEL: JobPhase.CANCELLED,
    Decision.RESUME: JobPhase.LAUNCHING,
    Decision.GIVE_UP: JobPhase.FAILED,
    Decision.HUNG_RESTART: JobPhase.LAUNCHING,
    Decision.HOLD: JobPhase.QUEUED,  # from QUEUED (a workload the backend's queue held) the phase stays, the queue changes
}


class ObservationOrder:
    """The newest observation applied to each job, so an older one is dropped, not applied.

    Observations reach the job service from two threads (the launcher's watch and the service's slow
    reconcile). One taken before a change can arrive after one taken since, and applying it would take
    the job back: a re-admitted Kueue workload went LAUNCHING, QUEUED, LAUNCHING. Launchers stamp
    `read_at` before they read, so of two observations the later stamp never read older state. The
    caller holds the job service's write lock."""

    def __init__(self) -> None:
        self._newest: dict[str, float] = {}

    def is_older(self, obs: Observation) -> bool:
        newest = self._newest.get(obs.job_id)
        return newest is not None and obs.read_at < newest

    def applied(self, obs: Observation) -> None:
        self._newest[obs.job_id] = max(obs.read_at, self._newest.get(obs.job_id, obs.read_at))

    def forget(self, job_id: str) -> None:
        self._newest.pop(job_id, None)


def names_a_replaced_workload(observed_name: str | None, current_name: str | None, replaced: Collection[str]) -> bool:
    """Whether an observation is about a workload a relaunch of this job has replaced. Kubernetes
    names repeat across relaunches, so there it never is; a local job's pid changes."""
    return observed_name is not None and observed_name != current_name and observed_name in replaced


def decide(
    phase: JobPhase,
    state: ObservedState,
    *,
    about_replaced_workload: bool = False,
    resumes_left: bool = True,
    requeue_disrupted: bool = False,
    requeueing: bool = False,
    deleting: bool = False,
    held: bool = False,
    hung: bool = False,
    hung_restarts_left: bool = True,
    leave_stranded: bool = False,
) -> Decision:
    """The decision for a job in `phase` when its backend reports `state`.

    `about_replaced_workload`: the observation names a workload a relaunch replaced
    (names_a_replaced_workload). `resumes_left`: the job has resumed fewer times than allowed.
    `requeue_disrupted`: a disrupted attempt goes back to the queue (requeues_on_disruption). `requeueing`:
    this service has already asked for that (once is enough). `deleting`: the observed workload is being deleted.
    `held`: the job's team budget holds it (JobRecord.hold): the service stopped its workload, so its end (GONE, or
    FAILED: the trainer's exit 75 after its checkpoint, or a kill) is that stop, not a fault.
    `hung`: the workload failed with the trainer's ExitCode.HUNG (its watchdog found the attempt hung).
    `hung_restarts_left`: the service has restarted the job after a hang fewer times than allowed.
    `leave_stranded`: the admitted job is stranded (no node of its flavor takes its pod) and its capacity set has
    another kind to go to (leaves_stranded): back to the queue without that kind, as a disrupted attempt goes.
    """
    if phase.is_terminal():
        return Decision.IGNORE
    if state in WORKLOAD_STOPPED and about_replaced_workload:
        # Acting on it would spend a resume on a workload that is running. FAILED and SUCCEEDED too: a hung restart
        # replaces a workload that exited, and its exit seen again (the watch and the reconcile both report it) would
        # restart, or fail, the attempt that replaced it.
        return Decision.STALE
    if state is ObservedState.GONE and deleting and phase in (JobPhase.LAUNCHING, JobPhase.RUNNING):
        # Relaunched once it is gone, not while its pods still terminate: a launch now would find the dying
        # workload (same name), and its end would spend a second resume. Held in no memory: a restarted service
        # waits the same way.
        return Decision.WAIT
    if held and state in (ObservedState.GONE, ObservedState.FAILED) and phase in (JobPhase.QUEUED, JobPhase.LAUNCHING, JobPhase.RUNNING):
        return Decision.HOLD  # stopped for its budget: no resume spent, launched again when the budget has room
    if state is ObservedState.RESTARTING and requeue_disrupted and not requeueing and resumes_left and not held:
        if phase in (JobPhase.LAUNCHING, JobPhase.RUNNING):
            return Decision.REQUEUE
    if state is ObservedState.PENDING and leave_stranded and not requeueing and not held and phase is JobPhase.LAUNCHING:
        return Decision.REQUEUE  # never ran: its GONE relaunches it (RELAUNCH), no resume spent
    if phase is JobPhase.CANCELLING:
        return Decision.FINISH_CANCEL if state in WORKLOAD_STOPPED else Decision.WAIT
    if phase not in (JobPhase.QUEUED, JobPhase.LAUNCHING, JobPhase.RUNNING):
        raise ValueError(f"no observation policy for phase {phase}")  # a new phase needs its own rows
    # QUEUED here is a job the backend holds in its queue: a job never handed over is launched by
    # JobRecovery, not by observations (there is no workload to observe).
    if state is ObservedState.QUEUED:
        return Decision.NOTE if phase is JobPhase.QUEUED else Decision.QUEUE
    if state is ObservedState.RUNNING:
        return Decision.NOTE if phase is JobPhase.RUNNING else Decision.START
    if state in (ObservedState.PENDING, ObservedState.RESTARTING):
        return Decision.ADMIT if phase is JobPhase.QUEUED else Decision.NOTE
    if state is ObservedState.SUCCEEDED:
        return Decision.SUCCEED
    if state is ObservedState.FAILED:
        if hung and phase is JobPhase.RUNNING and hung_restarts_left:
            # Not from LAUNCHING: a trainer runs for at least its hang limit (1 s or more) before it exits hung, and the
            # service sees it run within a poll; one that did not is failed (reason HUNG) rather than restarted unseen.
            return Decision.HUNG_RESTART
        return Decision.FAIL
    if state is ObservedState.GONE:
        # The trainer's stages are restartable (completion markers in the run dir): a rerun continues.
        if phase is not JobPhase.RUNNING:
            # Never started: waiting in a queue (the backend's, or the local one when the service stopped).
            return Decision.RELAUNCH
        return Decision.RESUME if resumes_left else Decision.GIVE_UP
    raise ValueError(f"no observation policy for state {state}")


def failure_reason(obs: Observation) -> str:
    """Machine-readable: the backend's reason, else the trainer's exit code by name."""
    if obs.reason:
        return obs.reason
    try:
        return ExitCode(obs.exit_code).name  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return f"EXIT_{obs.exit_code}" if obs.exit_code is not None else "Failed"


def failure_message(job_id: str, run_finished: RunOutcome | None, obs: Observation) -> str:
    """For people: the failed stage's own message if the trainer sent one, what the exit code
    means, and where the logs are."""
    parts = []
    if run_finished is not None and not run_finished.ok and run_finished.message:
        parts.append(f"{run_finished.failed_stage or 'trainer'} stage: {run_finished.message}")
    if obs.exit_code is not None:
        parts.append(describe_exit_code(obs.exit_code))
    else:
        parts.append(obs.message or "the workload failed")
    parts.append(f"logs: `rljob logs {job_id}`")
    return "; ".join(parts)


def queued_message(phase: JobPhase, obs: Observation) -> str:
    """For people: why the backend's queue holds the job; from RUNNING, that it will resume."""
    queue = obs.queue.name if obs.queue else "the backend's queue"
    why = obs.message or (obs.queue.reason if obs.queue else "waiting for capacity")
    if phase is JobPhase.RUNNING:
        return f"preempted, back in {queue}: {why}; it resumes from its last checkpoint when admitted again"
    return f"waiting in {queue}: {why}"


def lost_workload_reason(obs: Observation) -> str:
    return obs.message or "the workload disappeared"


def resume_limit_message(job_id: str, resumes: int, obs: Observation) -> str:
    return (
        f"{lost_workload_reason(obs)}; resumed {resumes} time(s) already, giving up. Check `rljob logs {job_id}` "
        "and the machine's health, then submit the job again (finished stages are reused)"
    )


def requeues_on_disruption(capacities: tuple[str, ...], obs: Observation, can_requeue: bool) -> bool:
    """Whether a disrupted attempt goes back to the queue instead of being retried in place: only for a job
    that may run on several kinds of capacity (the pool may place it on another), only for a disruption (a
    preempted VM, an eviction: the trainer did not fail), and only where the launcher can requeue."""
    return can_requeue and len(capacities) > 1 and obs.disrupted


def leaves_stranded(kinds_left: tuple[str, ...], obs: Observation, can_requeue: bool) -> bool:
    """Whether a stranded job goes back to the queue without the kind it is stranded on: only where the launcher can
    requeue, and only while its hardware.capacity has another kind left (`kinds_left`: without the one it leaves)."""
    return can_requeue and obs.reason == STRANDED_REASON and obs.capacity is not None and bool(kinds_left)


def requeue_message(obs: Observation) -> str:
    if obs.reason == STRANDED_REASON:
        return (
            f"stranded on {obs.flavor or obs.capacity}: no node there took its pod; back to the queue without "
            f"{obs.capacity}, so the pool places it on the next kind of its hardware.capacity"
        )
    return (
        f"the trainer pod was disrupted ({obs.reason or 'DisruptionTarget'}) on "
        f"{obs.flavor or obs.capacity or 'its capacity'}; back to the queue, so the pool can place it on any kind "
        "of its hardware.capacity: it resumes from its last checkpoint"
    )
