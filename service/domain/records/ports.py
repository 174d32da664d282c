"""The ports the domain depends on; adapters implement them.

- the launcher (JobLauncher, with the optional StatusMirror, SubmitCheck and QueuePreview capabilities): starts,
  stops and observes a job's workload; `LocalProcessLauncher` (a `python -m trainer run` child
  process per job) and `K8sJobLauncher` (a batch/v1 Job or a JobSet on GKE), chosen once from
  configuration (service/adapters/launchers.py). Launchers only observe: the job service alone
  turns observations into phase transitions (observation_policy.py);
- the job store (JobStore, JobTx): adapters/store;
- the trainer's progress (ProgressSource): adapters/events_file.py;
- what the trainer leaves in the run directory (RunFiles): adapters/run_files.py;
- the leader lock (LeaderLock): which replica leads (service/leadership.py);
  adapters/leader_locks.py (a PostgreSQL advisory lock, a flock beside the SQLite file, or none).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from trainer.contract import JobSpec, ReproRecord, StepSamples, TrainerEvent
from trainer.contract.run.best_checkpoint import BestCheckpoint
from trainer.contract.run.eval_report import RowOutcome

from .eval_models import SuiteKey, SuiteVersion
from .manifest_sizes import ManifestSizes
from .models import JobEvent, JobFilters, JobRecord, ManifestRefused, MetricPoint, QueueStatus, TokenRecord
from .phases import JobPhase

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


# ---- the launcher ----------------------------------------------------------------------------


# An admitted job whose pod no node of its flavor can take, past the backend's limit: a PENDING observation's reason
# (service/adapters/k8s/stranded.py), logged once as a message and sent as a `job.stranded` webhook.
STRANDED_REASON = "Stranded"


class ObservedState(enum.StrEnum):
    """What a backend says about a workload; deliberately smaller than the job phases."""

    QUEUED = "queued"  # held by a queue for capacity (Kueue not admitted, a team quota); `queue` says where
    PENDING = "pending"  # admitted but not running yet (unschedulable, pulling, starting)
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
    queue: QueueStatus | None = None  # with QUEUED: which queue holds it, why, and its place in line
    # Once admitted: the kind of capacity (hardware.capacity's values) and, with Kueue, the ResourceFlavor the
    # workload was admitted into; None when the backend does not say (not admitted, or it cannot tell).
    capacity: str | None = None
    flavor: str | None = None
    disrupted: bool = False  # with RESTARTING: the attempt was disrupted (preempted, evicted), not failed
    # When the launcher began reading the backend (time.monotonic(), this process): the job service
    # applies a job's observations in this order and drops one read before the last it applied.
    read_at: float = field(default_factory=time.monotonic)


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

        Following, a launcher yields None when it has given everything that has arrived: one that can poll
        (local) when nothing is new, rather than waiting inside one step, and one that reads a stream
        (Kubernetes) before a read that may wait. The caller hands over what it has, and pauses when a step
        brought nothing.
        """


@runtime_checkable
class StatusMirror(Protocol):
    """Optional launcher capability: copy the service's view of a job onto its workload.

    The Kubernetes launcher has it (labels and annotations on the Job, so `kubectl` shows phase and
    progress); the local launcher has nothing to label. The job service checks for it once, when it
    is built, and mirrors from a background thread (status_mirror.py), never under its write lock.
    """

    def mirror_status(
        self,
        job_id: str,
        phase: str,
        stage: str | None = None,
        step: int | None = None,
        total: int | None = None,
        *,
        queue_position: int | None = None,
        queue_reason: str | None = None,
        placement: str | None = None,
    ) -> bool:
        """Write phase/stage/progress (and, while held by a queue, the place in line and why: both
        None otherwise; once admitted, the flavor or kind of capacity it was admitted into) onto the
        workload; False when the workload is gone."""


@runtime_checkable
class JobRequeue(Protocol):
    """Optional launcher capability: give a running job's workload back to its queue.

    The Kubernetes launcher has it: the Job goes (and its pods), and the relaunch that follows its GONE is a
    new workload that the queue (Kueue) places again among the kinds of capacity the spec allows. Used for a
    job of several kinds whose attempt was disrupted (observation_policy.requeues_on_disruption).
    """

    def requeue(self, job_id: str) -> None:
        """Delete the job's workload so that the next launch queues it afresh. Idempotent."""


@runtime_checkable
class SubmitCheck(Protocol):
    """Optional launcher capability: refuse at submit a valid spec this backend can never run.

    The local launcher has it (a TPU job on a machine without that TPU); the job service asks before
    storing anything, so such a job is a 422 naming the field, never a record that fails after launch.
    """

    def check_submittable(self, spec: JobSpec) -> None:
        """Raise InvalidRequest (naming the field and what to do) if this backend cannot run `spec`."""


@runtime_checkable
class QueuePreview(Protocol):
    """Optional launcher capability: where a job submitted now would stand in its backend's queue.

    The local launcher answers from its team queues (admission.py); the Kubernetes launcher from Kueue's
    visibility API for the job's LocalQueue. Asked for an estimate (estimates.py), never to decide anything.
    """

    def queue_position_for(self, spec: JobSpec) -> int | None:
        """0: it would be admitted at once; 1: next to be admitted; None: the backend cannot say."""


# ---- the job store ---------------------------------------------------------------------------


class JobTx(Protocol):
    """One store transaction. Everything done through it commits together or not at all."""

    def get(self, job_id: str, *, for_update: bool = False) -> JobRecord | None: ...

    def find_by_idempotency_key(self, team: str, key: str) -> JobRecord | None: ...

    def insert(self, record: JobRecord) -> None: ...

    def update(self, record: JobRecord) -> None: ...

    def append_event(self, record: JobRecord, kind: str, data: dict[str, Any], time: datetime) -> int:
        """Append to the job's event log, set record.last_event_seq and return the new seq."""

    def append_events(self, record: JobRecord, entries: Sequence[tuple[str, dict[str, Any]]], time: datetime) -> None:
        """append_event for each (kind, data) in order, as one write."""

    def add_metric_points(self, job_id: str, points: Sequence[MetricPoint]) -> None: ...

    def lock_team_admissions(self, team: str) -> None:
        """Until this transaction ends, no other transaction (of any replica) gets past this call for `team`: a
        budget check and the insert it admits are one unit per team (submission.py). Taken before anything else."""

    def require_term(self, term: int | None) -> None:
        """LeaderFenced unless `term` is the current leadership term; no new term can be taken until
        this transaction ends (service/adapters/store/leader_terms.py)."""

    def suite_version(self, key: SuiteKey, *, job_id: str, now: datetime) -> int:
        """The version number of this suite content: the one it already has, else the next of its scope and name
        (first seen now, in job `job_id`). Two transactions assigning one new content get one number."""


class JobStore(Protocol):
    def migrate(self) -> None: ...

    def ping(self) -> None:
        """Raise StoreUnavailable if the database cannot be reached."""

    def check_writable(self) -> None:
        """Raise StoreUnavailable, saying why, if a write could not be made now."""

    def transaction(self, *, wait_s: float | None = None) -> AbstractContextManager[JobTx]:
        """`wait_s`: the longest it waits for a lock another transaction holds (None: the database's own wait);
        past it, StoreUnavailable saying so, and nothing of it is stored."""

    def take_term(self, holder: str, now: datetime) -> int:
        """The next leadership term, for the replica that has just taken the leader lock."""

    def get(self, job_id: str) -> JobRecord | None: ...

    def list_jobs(self, filters: JobFilters, *, before_pk: int | None, limit: int) -> list[tuple[int, JobRecord]]:
        """Newest first; (pk, record) pairs so the caller can build a cursor."""

    def list_active(self) -> list[JobRecord]:
        """Every job not in a terminal phase, oldest first."""

    def job_versions(self, phases: Collection[JobPhase]) -> dict[str, tuple[JobPhase, int]]:
        """Job id -> (phase, last event seq) of every job in `phases`, oldest first, without reading
        the records: every change that matters to a watcher logs an event, so a pair that did not
        move means a record that did not change (the progress poller re-reads only the others)."""

    def count_by_phase(self) -> dict[str, int]: ...

    def events_after(self, after_seq: int, *, job_id: str | None = None, team: str | None = None, limit: int = 500) -> list[JobEvent]: ...

    def events_of_kind(self, kind: str, job_ids: Collection[str]) -> list[JobEvent]:
        """Every event of `kind` (e.g. `storage`) of these jobs, oldest first."""

    def max_event_seq(self) -> int: ...

    def metric_points(self, job_id: str, *, limit: int) -> list[MetricPoint]: ...

    def suite_versions(self, scope: str, name: str) -> list[SuiteVersion]:
        """Every version of a suite in a scope, oldest first."""

    # Tokens: stored as sha256 hashes only.
    def add_token(self, token: TokenRecord, token_hash: str) -> None: ...

    def token_by_hash(self, token_hash: str) -> TokenRecord | None: ...

    def revoke_token(self, token_id: str, when: datetime) -> bool: ...

    def list_tokens(self) -> list[TokenRecord]: ...

    def close(self) -> None: ...


# ---- the trainer's progress and run files ---------------------------------------------------------


@dataclass(frozen=True)
class SkippedLine:
    """An events-file line longer than the reader takes at once: stepped over so progress goes on."""

    uri: str
    offset: int  # where the line starts in the file
    size_bytes: int
    limit_bytes: int


@dataclass(frozen=True)
class ProgressBatch:
    """Events read past a job's committed position; `end` is where the next read starts once
    they are folded (ProgressSource.commit). `more`: the read stopped at its size cap.
    `skipped`: over-long lines this read stepped over (the job's message says so)."""

    job_id: str
    events: list[TrainerEvent] = field(default_factory=list)
    end: int = 0
    more: bool = False
    skipped: tuple[SkippedLine, ...] = ()


class ProgressSource(Protocol):
    """Reads a job's trainer events (the events file) from the last committed position.

    Reading does not move that position: the job service commits a batch only after folding it, so
    a failed fold, or a reader racing with another, never loses events (folding drops repeats by seq).
    """

    def pending(self, record: JobRecord) -> bool:
        """Whether read_new may find something past the committed position. Cheap (a stat, no read):
        the poller asks it of every running job every round. False may be wrong for a while (an object
        store is asked less often); True only costs a read that finds nothing."""

    def read_new(self, record: JobRecord) -> ProgressBatch: ...

    def commit(self, batch: ProgressBatch) -> None: ...

    def forget(self, job_id: str) -> None: ...


class RunFiles(Protocol):
    """What the trainer leaves in a job's run directory (RunLayout), read back by the service.

    These outlive the workload: a Kubernetes pod is deleted with its Job after
    ttlSecondsAfterFinished, a local job's state directory may be cleaned, but the run directory
    (gs:// or local) is the job's permanent record.
    """

    def read_manifest(self, record: JobRecord) -> ManifestSizes | ManifestRefused | None:
        """manifest.json (trainer/storage/manifest.py); None if absent or unreadable; ManifestRefused for one too
        large to parse within the service's memory (recorded on the job)."""

    def stage_log_lines(self, record: JobRecord) -> Iterator[str]:
        """The published stage logs (logs/<stage>.log) in stage order, each after a header line."""

    def sample_steps(self, record: JobRecord) -> list[int]:
        """Steps with a samples file (RunLayout.samples_file), ascending; raises RunFilesUnavailable
        if the run directory cannot be listed, RunFileRefused if the samples directory is a link."""

    def read_repro(self, record: JobRecord) -> ReproRecord | None:
        """repro.json (trainer/contract/run/repro.py); None if absent or not a valid record (logged why).
        Raises RunFileRefused and RunFilesUnavailable as read_samples does."""

    def read_samples(self, record: JobRecord, step: int) -> StepSamples | None:
        """That step's samples; None if absent or not valid (logged why). Raises RunFileRefused if the
        file is a link, not a regular file or over the size bound (the job wrote it: never followed
        or read whole), RunFilesUnavailable if the storage cannot be read."""

    def read_eval_outcomes(self, record: JobRecord) -> list[RowOutcome] | None:
        """An eval job's per-row outcomes (RunLayout.eval_outcomes), each row's texts dropped; None if absent.
        Raises RunFileRefused for a file over its bound or not the trainer's (a bad line, more rows than a suite
        holds, a repeated row id), RunFilesUnavailable as read_samples does."""

    def read_best_checkpoint(self, record: JobRecord) -> BestCheckpoint | None:
        """The job's best-checkpoint record (best_checkpoint.py); None if absent or not valid. Raises as read_repro."""


class LeaderLock(Protocol):
    """Held by at most one replica at a time."""

    shared: bool  # False when no other replica can exist (nothing to hand over between replicas)

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True when this replica holds it now."""

    def holds(self) -> bool:
        """Whether the hold is still good (False once the database connection behind it is gone)."""

    def release(self) -> None: ...
