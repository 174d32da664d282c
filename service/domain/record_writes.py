"""What JobService writes onto a job record inside its store transaction: a phase change (through
`transition()`, with its event and timestamps), and the effects of an observation's Decision.

Only JobService's write path calls these, under its lock, on a record it has just re-read.
"""

from __future__ import annotations

from typing import Any

from service.domain.cost.budgets import QUEUE_REASON as BUDGET_QUEUE_REASON
from service.domain.cost.placement import close_billed_phase, place, placement_changed
from service.domain.health.hangs import hung_failure_message, hung_restart_message
from service.domain.records.manifest_sizes import ManifestSizes
from service.domain.records.models import JobRecord, ManifestRefused, QueueStatus
from service.domain.records.phases import JobPhase, transition
from service.domain.records.ports import STRANDED_REASON, Clock, JobTx, Observation
from trainer.contract import ExitCode

from .observation_policy import (
    Decision,
    failure_message,
    failure_reason,
    lost_workload_reason,
    queued_message,
    requeue_message,
    resume_limit_message,
)
from .progress import fold_manifest


def write_phase(tx: JobTx, rec: JobRecord, target: JobPhase, message: str, clock: Clock) -> None:
    """Move `rec` to `target` (IllegalTransition if the table forbids it) and log the change."""
    previous = rec.phase
    rec.phase = transition(previous, target)
    rec.message = message
    now = clock()
    if rec.phase_entered_at is not None:  # None: stored before 0004; its earlier phases are not counted
        spent = max(0.0, (now - rec.phase_entered_at).total_seconds())
        rec.phase_seconds[previous.value] = round(rec.phase_seconds.get(previous.value, 0.0) + spent, 3)
        close_billed_phase(rec, previous, spent)
    rec.phase_entered_at = now
    if target is not JobPhase.QUEUED:
        rec.queue = None
    if target is JobPhase.RUNNING and rec.started_at is None:
        rec.started_at = now
    if target.is_terminal():
        rec.finished_at = now
    data: dict[str, Any] = {"phase": target.value, "previous": previous.value, "message": message}
    if target is JobPhase.FAILED:
        data.update(failure_reason=rec.failure_reason, exit_code=rec.exit_code)
    if target is JobPhase.QUEUED and rec.queue is not None:
        data["queue"] = rec.queue.model_dump(mode="json")
    tx.append_event(rec, "phase", data, now)


def write_queue(tx: JobTx, rec: JobRecord, obs: Observation, clock: Clock) -> None:
    """A QUEUED job's place in its queue changed: keep it and log a `queue` event (SSE carries it)."""
    if obs.queue is None or obs.queue == rec.queue:
        return
    if rec.queue is None or obs.queue.reason != rec.queue.reason:
        # Only a new reason rewrites the message: a preempted job that moves up its queue keeps
        # saying that it was preempted and resumes from its checkpoint.
        rec.message = queued_message(rec.phase, obs)
    rec.queue = obs.queue
    tx.append_event(rec, "queue", obs.queue.model_dump(mode="json"), clock())


def write_held(tx: JobTx, rec: JobRecord, clock: Clock) -> None:
    """A job its budget holds, with no workload (stopped, or never handed over): QUEUED, queue reason BudgetExhausted,
    the hold's words as its message. Idempotent: a job already so is left as it is."""
    if rec.hold is None:
        return  # released meanwhile: the budget loop launches it
    queue = QueueStatus(name=f"team/{rec.team}", reason=BUDGET_QUEUE_REASON, message=rec.hold.message)
    rec.backend = None  # nothing holds a workload for it: cancelling it is immediate, launching it starts anew
    if rec.phase is JobPhase.QUEUED:
        if rec.queue != queue:
            rec.queue, rec.message = queue, rec.hold.message
            tx.append_event(rec, "queue", queue.model_dump(mode="json"), clock())
        return
    rec.queue = queue
    write_phase(tx, rec, JobPhase.QUEUED, rec.hold.message, clock)


def write_decision(
    decided: Decision,
    rec: JobRecord,
    tx: JobTx,
    obs: Observation,
    manifest: ManifestSizes | ManifestRefused | None,
    clock: Clock,
    max_hung_restarts: int = 0,
) -> str | None:
    """Carry `decided` out on `rec`. Returns the name of the workload a resume replaced, if any: the
    caller remembers it, so a late GONE about it is known to be stale."""
    if not decided.adopts_workload_name:
        return None
    if manifest is not None and decided.records_artifacts:
        # Same transaction as the terminal phase and logged before it: SSE readers, who stop
        # after the terminal phase, see the final artifacts first.
        tx.append_event(rec, "artifacts", fold_manifest(rec, manifest), clock())
    if obs.object_name and obs.object_name != rec.object_name:
        rec.object_name = obs.object_name
    if obs.capacity is not None and placement_changed(rec, obs.capacity, obs.flavor):
        placed = place(rec, obs.capacity, obs.flavor)
        tx.append_event(rec, "placement", {"capacity": placed.capacity, "flavor": placed.flavor, "message": placed.says()}, clock())
    replaced = None
    if decided is Decision.NOTE and rec.phase is JobPhase.QUEUED:
        write_queue(tx, rec, obs, clock)
    elif decided is Decision.NOTE and obs.message and obs.message != rec.message:
        rec.message = obs.message
        tx.append_event(rec, "message", {"message": obs.message, "reason": obs.reason}, clock())
    elif decided is Decision.QUEUE:
        message = queued_message(rec.phase, obs)
        rec.queue = obs.queue
        write_phase(tx, rec, JobPhase.QUEUED, message, clock)
    elif decided is Decision.ADMIT:
        write_phase(tx, rec, JobPhase.LAUNCHING, obs.message or "admitted; starting", clock)
    elif decided is Decision.START:
        write_phase(tx, rec, JobPhase.RUNNING, obs.message or "running", clock)
    elif decided is Decision.SUCCEED:
        rec.exit_code = obs.exit_code if obs.exit_code is not None else 0
        write_phase(tx, rec, JobPhase.SUCCEEDED, "finished successfully", clock)
    elif decided is Decision.FAIL:
        rec.exit_code = obs.exit_code
        hung = obs.exit_code == ExitCode.HUNG  # its hung restarts spent (Decision.HUNG_RESTART before)
        rec.failure_reason = ExitCode.HUNG.name if hung else failure_reason(obs)
        write_phase(
            tx, rec, JobPhase.FAILED, hung_failure_message(rec, obs) if hung else failure_message(rec.id, rec.report.outcome, obs), clock
        )
    elif decided is Decision.FINISH_CANCEL:
        write_phase(tx, rec, JobPhase.CANCELLED, "cancelled; the workload has stopped", clock)
    elif decided is Decision.REQUEUE:
        stranded = obs.capacity if obs.reason == STRANDED_REASON else None
        if stranded is not None and rec.placement is not None and stranded not in rec.placement.stranded:
            rec.placement.stranded.append(stranded)  # its relaunches leave that kind out (placement.launch_spec)
        rec.message = requeue_message(obs)
        tx.append_event(rec, "message", {"message": rec.message, "reason": "Requeued"}, clock())
    elif decided is Decision.RELAUNCH:
        rec.message = f"relaunching: {lost_workload_reason(obs)}"
        tx.append_event(rec, "message", {"message": rec.message}, clock())
    elif decided is Decision.RESUME:
        rec.resumes += 1
        replaced, rec.object_name = rec.object_name, None
        why = lost_workload_reason(obs)
        write_phase(tx, rec, JobPhase.LAUNCHING, f"resuming (attempt {rec.resumes + 1}): {why}", clock)
    elif decided is Decision.HUNG_RESTART:
        rec.resumes += 1
        rec.report.hung_restarts += 1
        replaced, rec.object_name = rec.object_name, None
        write_phase(tx, rec, JobPhase.LAUNCHING, hung_restart_message(rec, max_hung_restarts, obs), clock)
    elif decided is Decision.HOLD:
        replaced, rec.object_name = rec.object_name, None  # a late GONE about the stopped workload is stale
        write_held(tx, rec, clock)
    elif decided is Decision.GIVE_UP:
        rec.failure_reason = "ResumeLimit"
        write_phase(tx, rec, JobPhase.FAILED, resume_limit_message(rec.id, rec.resumes, obs), clock)
    return replaced
