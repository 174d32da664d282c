"""Ports the domain depends on; adapters implement them (adapters/store, adapters/local, adapters/k8s).

The launcher port lives in launcher_port.py (written first, shared with the Kubernetes adapter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from trainer.contract import StepSamples, TrainerEvent

from .models import JobEvent, JobFilters, JobRecord, MetricPoint, TokenRecord

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class JobTx(Protocol):
    """One store transaction. Everything done through it commits together or not at all."""

    def get(self, job_id: str, *, for_update: bool = False) -> JobRecord | None: ...

    def find_by_idempotency_key(self, team: str, key: str) -> JobRecord | None: ...

    def insert(self, record: JobRecord) -> None: ...

    def update(self, record: JobRecord) -> None: ...

    def append_event(self, record: JobRecord, kind: str, data: dict[str, Any], time: datetime) -> int:
        """Append to the job's event log, set record.last_event_seq and return the new seq."""

    def add_metric_point(self, job_id: str, point: MetricPoint) -> None: ...


class JobStore(Protocol):
    def migrate(self) -> None: ...

    def ping(self) -> None:
        """Raise StoreUnavailable if the database cannot be reached."""

    def transaction(self) -> AbstractContextManager[JobTx]: ...

    def get(self, job_id: str) -> JobRecord | None: ...

    def list_jobs(self, filters: JobFilters, *, before_pk: int | None, limit: int) -> list[tuple[int, JobRecord]]:
        """Newest first; (pk, record) pairs so the caller can build a cursor."""

    def list_active(self) -> list[JobRecord]:
        """Every job not in a terminal phase, oldest first."""

    def count_by_phase(self) -> dict[str, int]: ...

    def events_after(
        self, after_seq: int, *, job_id: str | None = None, team: str | None = None, limit: int = 500
    ) -> list[JobEvent]: ...

    def max_event_seq(self) -> int: ...

    def metric_points(self, job_id: str, *, limit: int) -> list[MetricPoint]: ...

    # Tokens: stored as sha256 hashes only.
    def add_token(self, token: TokenRecord, token_hash: str) -> None: ...

    def token_by_hash(self, token_hash: str) -> TokenRecord | None: ...

    def revoke_token(self, token_id: str, when: datetime) -> bool: ...

    def list_tokens(self) -> list[TokenRecord]: ...

    def close(self) -> None: ...


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

    def read_new(self, record: JobRecord) -> ProgressBatch: ...

    def commit(self, batch: ProgressBatch) -> None: ...

    def forget(self, job_id: str) -> None: ...


class LogSource(Protocol):
    def __call__(self, job_id: str, *, follow: bool, tail_lines: int | None) -> Iterator[str]: ...


class RunFiles(Protocol):
    """What the trainer leaves in a job's run directory (RunLayout), read back by the service.

    These outlive the workload: a Kubernetes pod is deleted with its Job after
    ttlSecondsAfterFinished, a local job's state directory may be cleaned, but the run directory
    (gs:// or local) is the job's permanent record.
    """

    def read_manifest(self, record: JobRecord) -> dict[str, Any] | None:
        """manifest.json (trainer/storage/manifest.py), or None if absent or unreadable."""

    def stage_log_lines(self, record: JobRecord) -> Iterator[str]:
        """The published stage logs (logs/<stage>.log) in stage order, each after a header line."""

    def sample_steps(self, record: JobRecord) -> list[int]:
        """Steps with a samples file (RunLayout.samples_file), ascending; raises RunFilesUnavailable
        if the run directory cannot be listed."""

    def read_samples(self, record: JobRecord, step: int) -> StepSamples | None:
        """That step's samples; None if absent, over the size bound or not valid (logged why).
        Raises RunFilesUnavailable if the storage cannot be read."""
