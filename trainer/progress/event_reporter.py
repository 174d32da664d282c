"""Progress reporting: each event as one JSON line on stdout and appended to the run's events file.

`seq` continues across restarts: the reporter reads the existing events file first, so a watcher
that remembers the last seq it saw can resume without duplicates.

A local events file gets each line at once. An object store (gs://) gets lines in batches: at every
stage boundary, artifact, evaluation and the end of the run at once, and train steps at most every
`flush_interval_s` (GCS allows about one update per second per object). Each batch is appended at a
cost that does not grow with the file (ArtifactStore.append_bytes), so a 3,000-step run no longer
rewrites the whole file per event.
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
    GoodputMeasured,
    RunFinished,
    RunStarted,
    RunStorage,
    Stage,
    StageFinished,
    StageStarted,
    StorageMeasured,
    TrainerEvent,
    TrainStep,
    dump_event,
    parse_event,
)
from trainer.contract.run.goodput import TrainGoodput
from trainer.storage import ArtifactStore

DEFAULT_OBJECT_STORE_FLUSH_S = 5.0
# Events that may wait for the next periodic flush; every other kind is written at once.
BATCHED_EVENTS = (TrainStep, GoodputMeasured)


def _now() -> datetime:
    return datetime.now(UTC)


def _nonfinite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _finite_only(fields: dict[str, Any], *, name_dropped: bool = False) -> dict[str, Any]:
    """JSON has no NaN or inf (they would be written as null): drop such metrics, and make such a
    headline value (loss, kl, ...) None, which the event's schema allows. With `name_dropped`, the
    names of what was dropped go in `nonfinite`, so a diverging run stays visible."""
    dropped = sorted(k for k, v in fields.items() if _nonfinite(v))
    out: dict[str, Any] = {k: (None if _nonfinite(v) else v) for k, v in fields.items()}
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
        flush_interval_s: float | None = None,
    ):
        self._store, self._uri, self._job_id = store, events_uri, job_id
        self._stdout = stdout if stdout is not None else sys.stdout
        self._clock = clock
        self._lock = threading.Lock()
        self._unsent: list[str] = []  # lines not yet in the events file (batched, or a failed write)
        self._existing = self._read_existing()
        self.attempt = 0  # this run's RunStarted.attempt, once announced
        self.listeners: list[Callable[[TrainerEvent], None]] = []  # told of every event sent (the hang watchdog)
        self._sealed = False  # after the hang watchdog's last events: nothing more is written
        self._next_seq = (self._existing[-1].seq + 1) if self._existing else 0
        if flush_interval_s is None:
            flush_interval_s = DEFAULT_OBJECT_STORE_FLUSH_S if events_uri.startswith("gs://") else 0.0
        self._flush_interval_s = flush_interval_s
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if flush_interval_s > 0:
            self._flusher = threading.Thread(target=self._flush_periodically, name="events-flush", daemon=True)
            self._flusher.start()

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

    def emit(self, event_cls: type[TrainerEvent], **fields: Any) -> TrainerEvent:
        with self._lock:
            event = event_cls(seq=self._next_seq, time=self._clock(), job_id=self._job_id, **fields)
            if self._sealed:
                return event  # the run's end is written already (seal)
            self._next_seq += 1
            line = dump_event(event)
            self._stdout.write(line + "\n")
            self._stdout.flush()
            self._unsent.append(line)
            if self._flush_interval_s <= 0 or not isinstance(event, BATCHED_EVENTS):
                self._flush_locked()  # a StorageError goes to the caller; the lines stay pending
        for listener in self.listeners:
            listener(event)
        return event

    def seal(self) -> None:
        """Write what is pending and accept no more events: the hang watchdog's RunFinished is the run's last, whatever
        the pipeline's thread, seeing its stage killed, reports after it."""
        with self._lock:
            self._sealed = True
            self._flush_locked()

    def flush(self) -> None:
        """Write every pending line now."""
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        """Stop the periodic flusher and write what is pending (the pipeline calls this last)."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=30)
        self.flush()

    def _flush_locked(self) -> None:
        if not self._unsent:
            return
        self._store.append_bytes(self._uri, "".join(f"{line}\n" for line in self._unsent).encode())
        self._unsent.clear()

    def _flush_periodically(self) -> None:
        while not self._stop.wait(self._flush_interval_s):
            try:
                self.flush()
            except Exception as e:  # noqa: BLE001 - the next flush retries; training must go on
                print(f"rljob: writing progress events failed, retrying in {self._flush_interval_s:.0f}s: {e}", file=sys.stderr)

    # Convenience wrappers so callers name the event they mean.
    def run_started(self, attempt: int, run_uri: str) -> TrainerEvent:
        self.attempt = attempt
        return self.emit(RunStarted, attempt=attempt, run_uri=run_uri)

    def stage_started(self, stage: Stage) -> TrainerEvent:
        return self.emit(StageStarted, stage=stage)

    def stage_finished(self, stage: Stage, duration_s: float, *, skipped: bool = False, reason: str | None = None) -> TrainerEvent:
        return self.emit(StageFinished, stage=stage, duration_s=duration_s, skipped=skipped, reason=reason)

    def train_step(self, **fields: Any) -> TrainerEvent:
        return self.emit(TrainStep, **_finite_only(fields, name_dropped=True))

    def eval_result(self, **fields: Any) -> TrainerEvent:
        return self.emit(EvalResult, **_finite_only(fields))

    def artifact(self, name: str, uri: str, size_bytes: int | None = None) -> TrainerEvent:
        return self.emit(ArtifactWritten, name=name, uri=uri, size_bytes=size_bytes)

    def storage(self, stage: Stage | None, measured: RunStorage) -> TrainerEvent:
        return self.emit(StorageMeasured, stage=stage, storage=measured)

    def goodput(self, train: TrainGoodput) -> TrainerEvent:
        return self.emit(GoodputMeasured, attempt=max(self.attempt, 1), train=train)

    def run_finished(self, ok: bool, exit_code: int, message: str = "", failed_stage: Stage | None = None) -> TrainerEvent:
        return self.emit(RunFinished, ok=ok, exit_code=exit_code, message=message, failed_stage=failed_stage)
