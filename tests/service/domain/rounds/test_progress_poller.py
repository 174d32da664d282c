"""The progress poller costs next to nothing for jobs where nothing changed: with many running jobs and
no new events a round reads no job record, no events file and writes nothing; a job whose events file
grows is read (alone) in the next round; QUEUED jobs are not looked at; and "stalled" still comes with
time alone. Real store, real EventsFileReader over real files; the store and the reader are counted
through their own methods."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.adapters.events_file import EventsFileReader
from service.adapters.store import SqlJobStore
from service.domain.health.learning_health import HealthPolicy
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.records.models import Caller
from service.domain.records.ports import ObservedState
from service.domain.rounds.progress_poller import ProgressPoller
from tests.service.service_fakes import FakeLauncher
from tests.service.service_helpers import T0, ManualClock, spec_body
from trainer.contract import JobSpec, RunLayout, Stage, StageStarted, TrainerEvent, TrainStep, dump_event

TEAM_A = Caller(team="team-a", token_id="tok_a")
POLICY = HealthPolicy(stall_floor_s=300.0, stall_step_intervals=5.0)
JOBS = 12


class Calls:
    """Counts calls of chosen methods of an object (by the first argument's job id where there is one)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, target: object, *names: str) -> None:
        self.counts: Counter[str] = Counter()
        self.jobs: list[str] = []
        for name in names:
            monkeypatch.setattr(target, name, self._counted(name, getattr(target, name)))

    def _counted(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            if args:
                self.jobs.append(getattr(args[0], "id", args[0]))
            return real(*args, **kwargs)

        return call

    def reset(self) -> None:
        self.counts.clear()
        self.jobs.clear()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def events_reader() -> EventsFileReader:
    return EventsFileReader()


@pytest.fixture
def service(store: SqlJobStore, fake_launcher: FakeLauncher, events_reader: EventsFileReader, clock: ManualClock) -> JobService:
    return JobService(JobPorts(store, fake_launcher, events_reader), JobPolicies(health=POLICY), clock=clock)


@pytest.fixture
def poller(service: JobService, store: SqlJobStore, events_reader: EventsFileReader, clock: ManualClock) -> ProgressPoller:
    return ProgressPoller(service, store, events_reader, clock=clock, health_policy=POLICY)


def _submit(service: JobService, tmp_path: Path, state: ObservedState, n: int = JOBS) -> list[str]:
    ids = []
    for i in range(n):
        job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path, name=f"job-{i}")))[0].id
        service.apply_observation(service.launcher.set(job_id, state))  # type: ignore[attr-defined]
        ids.append(job_id)
    return ids


def _append(tmp_path: Path, job_id: str, *events: TrainerEvent) -> None:
    path = Path(RunLayout(str(tmp_path / "runs"), job_id).events)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(dump_event(e) + "\n" for e in events)


def _step(job_id: str, seq: int, step: int, clock: ManualClock) -> TrainStep:
    return TrainStep(seq=seq, time=clock(), job_id=job_id, step=step, total_steps=100, loss=0.5, kl=0.01)


def _training(tmp_path: Path, job_id: str, clock: ManualClock) -> None:
    _append(tmp_path, job_id, StageStarted(seq=0, time=clock(), job_id=job_id, stage=Stage.TRAIN), _step(job_id, 1, 1, clock))


def test_a_round_without_new_events_reads_no_record_and_no_events_file(
    service: JobService, poller: ProgressPoller, store: SqlJobStore, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _submit(service, tmp_path, ObservedState.RUNNING)
    for job_id in ids:
        _training(tmp_path, job_id, clock)
    poller.poll_once()  # reads and folds every file
    poller.poll_once()  # reads the records the fold changed
    assert {store.get(job_id).report.step for job_id in ids} == {1}  # type: ignore[union-attr]

    db = Calls(monkeypatch, store, "get", "list_active", "transaction")
    reader = Calls(monkeypatch, service.progress, "read_new")
    for _ in range(3):
        clock.advance(10)
        poller.poll_once()
    assert db.counts == Counter() and reader.counts == Counter()

    grown = ids[JOBS // 2]
    _append(tmp_path, grown, _step(grown, 2, 2, clock))
    poller.poll_once()
    assert reader.jobs == [grown]  # the one file that grew, and no other
    assert store.get(grown).report.step == 2  # type: ignore[union-attr]
    db.reset()
    reader.reset()
    poller.poll_once()  # the fold moved that job's version: its record is read once more
    poller.poll_once()
    assert db.counts == Counter({"get": 1}) and db.jobs == [grown] and reader.counts == Counter()


def test_queued_jobs_are_not_looked_at(
    service: JobService, poller: ProgressPoller, store: SqlJobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _submit(service, tmp_path, ObservedState.QUEUED)
    assert {store.get(job_id).phase.value for job_id in ids} == {"QUEUED"}  # type: ignore[union-attr]
    db = Calls(monkeypatch, store, "get", "list_active", "transaction")
    progress = Calls(monkeypatch, service.progress, "pending", "read_new")
    for _ in range(3):
        poller.poll_once()
    assert db.counts == Counter() and progress.counts == Counter()


def test_stalled_comes_with_time_alone_and_is_judged_only_when_it_can_change(
    service: JobService, poller: ProgressPoller, store: SqlJobStore, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [job_id] = _submit(service, tmp_path, ObservedState.RUNNING, n=1)
    _training(tmp_path, job_id, clock)
    poller.poll_once()
    poller.poll_once()

    def verdicts() -> list[str]:
        return [e.data["verdict"] for e in store.events_after(0, job_id=job_id) if e.kind == "health"]

    assert verdicts() == ["signal"]
    judged = Calls(monkeypatch, service, "judge_health")
    clock.advance(299)  # the floor is 300 s after the step
    poller.poll_once()
    clock.advance(1)  # reached, not passed
    poller.poll_once()
    assert judged.counts == Counter() and verdicts() == ["signal"]

    clock.advance(1)
    poller.poll_once()
    assert verdicts() == ["signal", "stalled"]
    clock.advance(3600)
    for _ in range(3):
        poller.poll_once()
    assert verdicts() == ["signal", "stalled"]  # once, not once per round
    # The round after the write re-judges the changed record; past the moment, nothing more can change.
    assert judged.counts == Counter({"judge_health": 2})

    _append(tmp_path, job_id, _step(job_id, 2, 2, clock))  # the trainer moves again
    poller.poll_once()
    assert verdicts() == ["signal", "stalled", "signal"]
    assert store.get(job_id).health_verdict == "signal"  # type: ignore[union-attr]


def test_a_local_events_file_is_pending_exactly_while_it_holds_more_than_was_committed(
    service: JobService, store: SqlJobStore, clock: ManualClock, tmp_path: Path
) -> None:
    [job_id] = _submit(service, tmp_path, ObservedState.RUNNING, n=1)
    reader = service.progress
    record = store.get(job_id)
    assert record is not None and not reader.pending(record)  # no file yet
    _training(tmp_path, job_id, clock)
    assert reader.pending(record)
    service.ingest_progress(job_id)
    assert not reader.pending(record)
    with Path(RunLayout(str(tmp_path / "runs"), job_id).events).open("a") as f:
        f.write('{"half a line')
    assert reader.pending(record)  # a line being written: read, and left for the next call


def test_an_object_store_is_asked_for_its_size_at_most_every_interval(
    store: SqlJobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def object_size(root: str, uri: str) -> int:  # one metadata request to the bucket
        asked.append(uri)
        return 100

    monkeypatch.setattr("service.adapters.events_file.run_file_size", object_size)
    now = [1000.0]
    reader = EventsFileReader(remote_check_interval_s=2.0, monotonic=lambda: now[0])
    service = JobService(JobPorts(store, FakeLauncher(), reader))
    record = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path, output="gs://bucket/runs")))[0]
    assert reader.pending(record)
    assert not reader.pending(record)  # asked 0 s ago: not again yet
    now[0] += 2.0
    assert reader.pending(record)
    assert asked == [RunLayout("gs://bucket/runs", record.id).events] * 2
