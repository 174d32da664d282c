"""The trainer's process exit codes: the contract Kubernetes podFailurePolicy and the local launcher read.

Values come from sysexits(3) where one fits, so they never collide with Python's own 1 (an unhandled
exception) or with 128+N (killed by signal N, e.g. 137 for OOMKilled, 143 for SIGTERM).
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    SUCCESS = 0
    # The spec is invalid: running it again cannot help. podFailurePolicy: FailJob.
    INVALID_SPEC = 65  # EX_DATAERR
    # The output location is missing or not writable, or a source cannot be read for lack of
    # permission: an operator has to fix IAM or the bucket first. podFailurePolicy: FailJob.
    STORAGE = 77  # EX_NOPERM
    # A transient failure (network, preemption signal, a stage interrupted): a new pod resumes
    # from the last checkpoint. Counted against backoffLimit.
    RETRYABLE = 75  # EX_TEMPFAIL
    # A deterministic failure inside a stage (MaxText rejected the config, the export is not
    # finite, ...): retrying wastes TPU time. podFailurePolicy: FailJob.
    NON_RETRYABLE = 70  # EX_SOFTWARE
    # No progress event for longer than the job's hang limit (trainer/contract/spec/hang.py): the trainer wrote every
    # thread's stacks to the stage log, stopped its stage and exited. Not in sysexits (none fits), past its range
    # (64-78) so it never collides with one. The service restarts the job from its last checkpoint a bounded number
    # of times (RLJOB_MAX_HUNG_RESTARTS), then fails it with reason HUNG. Not FailJob on Kubernetes: the Job's
    # backoffLimit retries the pod in place, as after exit 75.
    HUNG = 79

    @property
    def retryable(self) -> bool:
        return self is ExitCode.RETRYABLE


# Exit codes after which a pod must not be retried; rendered into podFailurePolicy.
NON_RETRYABLE_EXIT_CODES: tuple[int, ...] = (
    ExitCode.INVALID_SPEC,
    ExitCode.STORAGE,
    ExitCode.NON_RETRYABLE,
)


def describe_exit_code(code: int | None) -> str:
    """A human sentence for an exit code, used in failure messages by both launchers."""
    if code is None:
        return "the trainer exited without an exit code"
    try:
        known = ExitCode(code)
    except ValueError:
        known = None
    if known is ExitCode.SUCCESS:
        return "the trainer finished successfully"
    if known is ExitCode.INVALID_SPEC:
        return "the trainer rejected the job spec (exit 65); fix the spec and submit a new job"
    if known is ExitCode.STORAGE:
        return (
            "the trainer could not use its storage (exit 77); check the bucket exists and the job's "
            "service account can create and delete objects in it"
        )
    if known is ExitCode.RETRYABLE:
        return "the trainer hit a transient failure (exit 75); it resumes from its last checkpoint when rerun"
    if known is ExitCode.HUNG:
        return (
            "the trainer made no progress for longer than its hang limit (exit 79); every thread's stacks are in the "
            "stage log, and the job restarts from its last checkpoint a limited number of times"
        )
    if known is ExitCode.NON_RETRYABLE:
        return "a trainer stage failed deterministically (exit 70); see the stage log for the cause"
    if code == 137:
        return "the trainer was killed (exit 137, SIGKILL), most often out of memory"
    if code == 143:
        return "the trainer was terminated (exit 143, SIGTERM)"
    if code > 128:
        return f"the trainer was killed by signal {code - 128} (exit {code})"
    if code < 0:
        return f"the trainer was killed by signal {-code}"
    return f"the trainer failed unexpectedly (exit {code}); see its log"
