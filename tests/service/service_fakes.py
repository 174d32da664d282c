"""Fakes at the ports: a launcher the test drives by hand and a progress source fed with events."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

from service.domain.records.errors import LaunchFailed
from service.domain.records.models import JobRecord
from service.domain.records.ports import LaunchResult, Observation, ObservationSink, ObservedState, ProgressBatch
from trainer.contract import JobSpec, TrainerEvent


class FakeLauncher:
    """Records calls; `observe()` answers from `states`; `emit()` pushes like a watcher would."""

    backend = "fake"

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.cancelled: list[str] = []
        self.states: dict[str, Observation] = {}
        self.fail_launch: str | None = None
        self.sink: ObservationSink | None = None
        self.log_lines: dict[str, list[str]] = {}
        self.log_open: set[str] = set()  # following these: None (nothing new) until discarded
        self._lock = threading.Lock()

    def start(self, sink: ObservationSink) -> None:
        self.sink = sink

    def stop(self) -> None:
        self.sink = None

    def launch(self, job_id: str, spec: JobSpec) -> LaunchResult:
        if self.fail_launch:
            raise LaunchFailed(self.fail_launch)
        with self._lock:
            self.launched.append(job_id)
            self.states[job_id] = Observation(job_id, ObservedState.PENDING, message="fake: pending")
        return LaunchResult(backend=self.backend, object_name=f"fake/{job_id}")

    def cancel(self, job_id: str) -> None:
        with self._lock:
            self.cancelled.append(job_id)

    def observe(self, job_id: str) -> Observation:
        return self.states.get(job_id) or Observation(job_id, ObservedState.GONE, message="fake: no such workload")

    def logs(self, job_id: str, *, follow: bool = False, tail_lines: int | None = None) -> Iterator[str | None]:
        lines = self.log_lines.get(job_id, [])
        yield from (lines[-tail_lines:] if tail_lines else lines)
        while follow and job_id in self.log_open:
            yield None

    def set(self, job_id: str, state: ObservedState, **kw: object) -> Observation:
        obs = Observation(job_id, state, **kw)  # type: ignore[arg-type]
        self.states[job_id] = obs
        return obs

    def emit(self, job_id: str, state: ObservedState, **kw: object) -> None:
        obs = self.set(job_id, state, **kw)
        if self.sink is not None:
            self.sink(obs)


class FakeProgress:
    """A ProgressSource whose 'file' is a list; read_new returns what was added since the last
    committed read, and `replay_all` makes the next read return everything again (as after a
    service restart)."""

    def __init__(self) -> None:
        self.events: dict[str, list[TrainerEvent]] = {}
        self.offsets: dict[str, int] = {}

    def add(self, event: TrainerEvent) -> None:
        self.events.setdefault(event.job_id, []).append(event)

    def pending(self, record: JobRecord) -> bool:
        return len(self.events.get(record.id, [])) > self.offsets.get(record.id, 0)

    def read_new(self, record: JobRecord) -> ProgressBatch:
        events = self.events.get(record.id, [])
        start = self.offsets.get(record.id, 0)
        return ProgressBatch(record.id, events[start:], end=len(events))

    def commit(self, batch: ProgressBatch) -> None:
        self.offsets[batch.job_id] = max(self.offsets.get(batch.job_id, 0), batch.end)

    def forget(self, job_id: str) -> None:
        self.offsets.pop(job_id, None)

    def replay_all(self) -> None:
        self.offsets.clear()


def now() -> datetime:
    return datetime.now(UTC)
