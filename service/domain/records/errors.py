"""Domain exceptions. api/errors.py maps each that can reach a caller to an HTTP status in one place;
adapters wrap infrastructure errors in these with context (`raise LaunchFailed(...) from e`).
"""

from __future__ import annotations


class DomainError(Exception):
    """Base class: the message is safe to show to the caller and says what to do."""


class JobNotFound(DomainError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id!r} visible to your team")
        self.job_id = job_id


class IllegalTransition(DomainError):
    def __init__(self, current: str, target: str) -> None:
        super().__init__(f"a job cannot move from {current} to {target}")
        self.current = current
        self.target = target


class NotCancellable(DomainError):
    def __init__(self, job_id: str, phase: str) -> None:
        super().__init__(f"job {job_id} is already {phase}; there is nothing to cancel")
        self.job_id = job_id
        self.phase = phase


class IdempotencyConflict(DomainError):
    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was already used for job {job_id} with a different spec; use a new key for a different job"
        )
        self.key = key
        self.job_id = job_id


class InvalidRequest(DomainError):
    """A request that is well-formed JSON but asks for something impossible (mapped to 422)."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class BadCursor(DomainError):
    def __init__(self) -> None:
        super().__init__("the cursor is not one this service issued; start again without a cursor")


class NotReady(DomainError):
    def __init__(self) -> None:
        super().__init__("the service is still re-attaching to running jobs; retry in a few seconds")


class TooManyLogFollowers(DomainError):
    def __init__(self, limit: int, team: str | None = None) -> None:
        if team is None:
            what = f"{limit} log streams are already being followed (the service's limit)"
        else:
            what = f"team {team} already follows {limit} log streams (its share of the service's limit)"
        super().__init__(f"{what}; retry later, or read the log without follow=true")
        self.limit = limit


class SamplesNotFound(DomainError):
    """A job has no completion samples (yet, or for the step asked for), or they cannot be read."""


class ReproNotFound(DomainError):
    """A job has no readable repro.json (not written yet: the trainer writes it before its first stage)."""


class RunFilesUnavailable(DomainError):
    """The job's run directory could not be read (storage unreachable or refusing): worth a retry."""


class RunFileRefused(DomainError):
    """A file in a job's run directory is not one the service reads: a symlink (or under one), not a
    regular file, or over the size bound. The job wrote it, so it is the job's to fix, not a retry."""


class EvalsNotComparable(DomainError):
    """Two eval jobs that cannot be compared (not both finished evals, different suites or suite versions, rows that
    do not pair); the message says why and what to do."""


class Unauthenticated(DomainError):
    def __init__(self, message: str = "a valid bearer token is required (Authorization: Bearer <token>)") -> None:
        super().__init__(message)


class AdminOnly(DomainError):
    """A valid token that is not an admin's asked for what only admins see (mapped to 403)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"only an admin's token may read {what}; ask an admin (rljob token create --admin)")


class LaunchFailed(DomainError):
    """The backend refused or failed to create the workload. Both launchers raise this one class; the
    job service catches every launch error and fails the job with its message, so none reaches a caller."""


class StoreUnavailable(DomainError):
    pass


class IdempotencyKeyTaken(DomainError):
    """Another transaction stored a job with this team's Idempotency-Key after this one looked (a race
    between replicas); the store refused the second. The caller reads the first and answers with it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"Idempotency-Key {key!r} was just used by a concurrent submission")
        self.key = key


class LeaderFenced(DomainError):
    """A write made for a leadership term that is no longer the current one: another replica leads now.
    The write is refused in its own transaction; the replica stops its leader work."""

    def __init__(self, term: int | None, current: int) -> None:
        mine = "no term" if term is None else f"term {term}"
        super().__init__(f"this replica no longer leads ({mine}; the current term is {current}); another replica does its work")
        self.term = term
        self.current = current
