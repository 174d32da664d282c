"""Job phases: one enum, one transition table, one `transition()` that refuses illegal moves.

Stage (convert/train/export) and step counters are fields on the job, not phases: a phase says who
is responsible for the job right now, a stage says what the trainer is doing inside RUNNING.
"""

from __future__ import annotations

import enum

from .errors import IllegalTransition


class JobPhase(enum.StrEnum):
    QUEUED = "QUEUED"  # waiting for capacity: not yet handed to a backend, or held by its queue (Kueue, team quota)
    LAUNCHING = "LAUNCHING"  # admitted by the backend: waiting for a node, or starting the process
    RUNNING = "RUNNING"  # the backend reports the trainer running
    CANCELLING = "CANCELLING"  # a cancel was requested; the workload has not been seen to stop yet
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        return self in TERMINAL


# Terminal: nothing can move a job out of these, so late or duplicate events are ignored.
# SUCCEEDED, FAILED: the workload has exited and its exit was recorded.
# CANCELLED: the workload was seen to stop (or never started) after a cancel.
# CANCELLING is NOT terminal: the process may still be running and holding resources.
TERMINAL: frozenset[JobPhase] = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED})

# Cancellable: the phases in which a cancel request starts work.
# QUEUED, LAUNCHING, RUNNING: something is or may soon be running.
# CANCELLING is out: a second cancel is a no-op (the first one is still being carried out).
# Terminal phases are out: there is nothing left to stop.
CANCELLABLE: frozenset[JobPhase] = frozenset({JobPhase.QUEUED, JobPhase.LAUNCHING, JobPhase.RUNNING})

# Every phase has an entry, terminal ones an empty set: tests check the table is exhaustive.
ALLOWED_TRANSITIONS: dict[JobPhase, frozenset[JobPhase]] = {
    # No QUEUED -> FAILED on a launch error: launch() marks the job LAUNCHING before it calls the
    # launcher, so a failed launch fails the job from LAUNCHING. Once the backend holds the job in
    # its queue (a suspended Job waiting for Kueue, the local launcher's team queue) the job is QUEUED
    # again and the workload's own end can come from there.
    JobPhase.QUEUED: frozenset(
        {
            JobPhase.LAUNCHING,  # handed to the backend, or admitted by its queue
            JobPhase.RUNNING,  # admitted and started between two observations
            JobPhase.SUCCEEDED,  # ... and finished between two observations
            JobPhase.FAILED,  # the queued workload failed (deleted, deactivated by its queue)
            JobPhase.CANCELLING,  # a cancel of a workload the backend holds: it is deleted, then seen gone
            JobPhase.CANCELLED,  # nothing was started, so there is nothing to wait for
        }
    ),
    JobPhase.LAUNCHING: frozenset(
        {
            JobPhase.QUEUED,  # the backend's queue holds it for capacity (quota, team limit)
            JobPhase.RUNNING,
            JobPhase.SUCCEEDED,  # a short job can finish before a RUNNING observation is seen
            JobPhase.FAILED,
            JobPhase.CANCELLING,
        }
    ),
    JobPhase.RUNNING: frozenset(
        {
            JobPhase.SUCCEEDED,
            JobPhase.FAILED,
            JobPhase.CANCELLING,
            JobPhase.LAUNCHING,  # resumed: the process was lost (service or machine restart) and is relaunched
            JobPhase.QUEUED,  # preempted or evicted by its queue: waits for capacity, then resumes from its checkpoint
        }
    ),
    JobPhase.CANCELLING: frozenset({JobPhase.CANCELLED}),
    JobPhase.SUCCEEDED: frozenset(),
    JobPhase.FAILED: frozenset(),
    JobPhase.CANCELLED: frozenset(),
}


def can_transition(current: JobPhase, target: JobPhase) -> bool:
    return target in ALLOWED_TRANSITIONS[current]


def can_reach(start: JobPhase, target: JobPhase) -> bool:
    """Whether some chain of legal transitions leads from start to target: what a client polling the
    phase may see next (it can miss the phases in between, never go where no chain leads)."""
    frontier, visited = [start], {start}
    while frontier:
        current = frontier.pop()
        for nxt in ALLOWED_TRANSITIONS[current]:
            if nxt is target:
                return True
            if nxt not in visited:
                visited.add(nxt)
                frontier.append(nxt)
    return False


def transition(current: JobPhase, target: JobPhase) -> JobPhase:
    """Return `target` if the move is legal, else raise IllegalTransition."""
    if not can_transition(current, target):
        raise IllegalTransition(current.value, target.value)
    return target
