"""The launcher port: how the job service starts, stops and observes a job's workload.

Two adapters implement it, chosen once from configuration (service/adapters/launchers.py):
`LocalProcessLauncher` (a `python -m trainer run` child process per job) and `K8sJobLauncher`
(a batch/v1 Job or a JobSet on a GKE TPU node pool). Launchers only observe; the job service alone
turns observations into phase transitions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from trainer.contract import JobSpec


class ObservedState(enum.StrEnum):
    """What a backend says about a workload; deliberately smaller than the job phases."""

    PENDING = "pending"  # accepted by the backend but not running yet (queued, unschedulable, pulling)
    RUNNING = "running"
    RESTARTING = "restarting"  # an attempt ended by disruption; the backend retries it (not a failure)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    GONE = "gone"  # the backend has no such workload (deleted, never created, or lost)


@dataclass(frozen=True)
class Observation:
    job_id: str
    state: ObservedState
    message: str = ""  # for people: what is happening and, on trouble, what to do
    reason: str | None = None  # for machines: FailedScheduling, OOMKilled, DeadlineExceeded, ...
    exit_code: int | None = None
    object_name: str | None = None  # the backend's name for the workload (Job name, pid)
    observed_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class LaunchResult:
    backend: str  # "local" or "kubernetes"
    object_name: str  # Job/JobSet name or "pid:<n>"


ObservationSink = Callable[[Observation], None]


@runtime_checkable
class JobLauncher(Protocol):
    backend: str

    def start(self, sink: ObservationSink) -> None:
        """Begin pushing observations (process exits, watch events) into `sink`."""

    def stop(self) -> None:
        """Stop background watching; running workloads are left alone."""

    def launch(self, job_id: str, spec: JobSpec) -> LaunchResult:
        """Create the workload. Idempotent per job_id: a second call returns the existing one."""

    def cancel(self, job_id: str) -> None:
        """Stop the workload and everything it started. Idempotent; a missing workload is fine."""

    def observe(self, job_id: str) -> Observation:
        """Read the workload's current state now (used at start-up and by the slow reconcile)."""

    def logs(self, job_id: str, *, follow: bool = False, tail_lines: int | None = None) -> Iterator[str | None]:
        """Yield log lines of the workload while the backend still has them.

        Following, a launcher that can poll yields None when nothing new has arrived yet, rather
        than waiting inside one step: the caller pauses, checks its client, and asks again.
        """


@runtime_checkable
class StatusMirror(Protocol):
    """Optional launcher capability: copy the service's view of a job onto its workload.

    The Kubernetes launcher has it (labels and annotations on the Job, so `kubectl` shows phase and
    progress); the local launcher has nothing to label. The job service checks for it once, when it
    is built, and mirrors from a background thread (status_mirror.py), never under its write lock.
    """

    def mirror_status(
        self, job_id: str, phase: str, stage: str | None = None, step: int | None = None, total: int | None = None
    ) -> bool:
        """Write phase/stage/progress onto the workload; False when the workload is gone."""


@runtime_checkable
class SubmitCheck(Protocol):
    """Optional launcher capability: refuse at submit a valid spec this backend can never run.

    The local launcher has it (a TPU job on a machine without that TPU); the job service asks before
    storing anything, so such a job is a 422 naming the field, never a record that fails after launch.
    """

    def check_submittable(self, spec: JobSpec) -> None:
        """Raise InvalidRequest (naming the field and what to do) if this backend cannot run `spec`."""
