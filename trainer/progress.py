"""Progress reporting: each event as one JSON line on stdout and appended to the run's events file.

`seq` continues across restarts: the reporter reads the existing events file first, so a watcher
that remembers the last seq it saw can resume without duplicates.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from trainer.contract import (
    ArtifactWritten,
    EvalResult,
    RunFinished,
    RunStarted,
    Stage,
    StageFinished,
    StageStarted,
    TrainerEvent,
    TrainStep,
    dump_event,
    parse_event,
)
from trainer.storage import ArtifactStore


def _now() -> datetime:
    return datetime.now(UTC)


def _nonfinite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _finite_only(fields: dict[str, Any], *, name_dropped: bool = False) -> dict[str, Any]:
    """JSON has no NaN or inf (they would be written as null): drop such metrics, and make such a
    headline value (loss, kl, ...) None, which the event's schema allows. With `name_dropped`, the
    names of what was dropped go in `nonfinite`, so a diverging run stays visible."""
    dropped = sorted(k for k, v in fields.items() if _nonfinite(v))
    out = {k: (None if _nonfinite(v) else v) for k, v in fields.items()}
    if isinstance(out.get("metrics"), dict):
        dropped += sorted(k for k, v in out["metrics"].items() if _nonfinite(v))
        out["metrics"] = {k: v for k, v in out["metrics"].items() if not _nonfinite(v)}
    if name_dropped:
        out["nonfinite"] = sorted(set(dropped))
    return out


class EventReporter:
    """Thread-safe: the TensorBoard tailer emits TrainStep events from its own thread."""

    def __init__(
        self,
        store: ArtifactStore,
        events_uri: str,
        job_id: str,
        *,
        stdout: TextIO | None = None,
        clock: Callable[[], datetime] = _now,
    ):
        self._store, self._uri, self._job_id = store, events_uri, job_id
        self._stdout = stdout if stdout is not None else sys.stdout
        self._clock = clock
        self._lock = threading.Lock()
        self._unsent: list[str] = []  # gs:// lines not yet written (a failed rewrite)
        self._existing = self._read_existing()
        self._next_seq = (self._existing[-1].seq + 1) if self._existing else 0

    def _read_existing(self) -> list[TrainerEvent]:
        if not self._store.exists(self._uri):
            return []
        events = []
        for line in self._store.read_bytes(self._uri).decode().splitlines():
            if line.strip():
                try:
                    events.append(parse_event(line))
                except ValueError:
                    continue  # a torn last line from a killed writer; the numbering goes on after it
        return events

    @property
    def previous_events(self) -> list[TrainerEvent]:
        """Events from earlier attempts in this run directory."""
        return list(self._existing)

    def previous_attempts(self) -> int:
        return sum(1 for e in self._existing if isinstance(e, RunStarted))

    def emit(self, event_cls: type, **fields: Any) -> TrainerEvent:
        with self._lock:
            event = event_cls(seq=self._next_seq, time=self._clock(), job_id=self._job_id, **fields)
            self._next_seq += 1
            line = dump_event(event)
            self._stdout.write(line + "\n")
            self._stdout.flush()
            self._append(line)
            return event

    def _append(self, line: str) -> None:
        if self._uri.startswith("gs://"):
            # Object stores cannot append; rewrite the whole (small) file. A line whose write failed
            # (StorageError goes to the caller) stays pending and goes out with the next write.
            self._unsent.append(line)
            old = self._store.read_bytes(self._uri) if self._store.exists(self._uri) else b""
            self._store.write_bytes(self._uri, old + "".join(f"{pending}\n" for pending in self._unsent).encode())
            self._unsent.clear()
            return
        path = self._uri[len("file://") :] if self._uri.startswith("file://") else self._uri
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    # Convenience wrappers so callers name the event they mean.
    def run_started(self, attempt: int, run_uri: str) -> TrainerEvent:
        return self.emit(RunStarted, attempt=attempt, run_uri=run_uri)

    def stage_started(self, stage: Stage) -> TrainerEvent:
        return self.emit(StageStarted, stage=stage)

    def stage_finished(self, stage: Stage, duration_s: float, *, skipped: bool = False, reason: str | None = None):
        return self.emit(StageFinished, stage=stage, duration_s=duration_s, skipped=skipped, reason=reason)

    def train_step(self, **fields: Any) -> TrainerEvent:
        return self.emit(TrainStep, **_finite_only(fields, name_dropped=True))

    def eval_result(self, **fields: Any) -> TrainerEvent:
        return self.emit(EvalResult, **_finite_only(fields))

    def artifact(self, name: str, uri: str, size_bytes: int | None = None) -> TrainerEvent:
        return self.emit(ArtifactWritten, name=name, uri=uri, size_bytes=size_bytes)

    def run_finished(self, ok: bool, exit_code: int, message: str = "", failed_stage: Stage | None = None):
        return self.emit(RunFinished, ok=ok, exit_code=exit_code, message=message, failed_stage=failed_stage)
