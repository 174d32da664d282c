"""Folding trainer events takes at most its share of the CPU, in short stretches, and loses nothing by it.

A job that writes events as fast as it can used to keep the service's fold thread busy for as long as it wrote,
and every other team's request waited for the interpreter lock meanwhile (bench/control_plane/hostile_load.py measures that
latency against an unpaced service in the same run). Here, with the pacer's clocks in the test's hands: a fold
earns a rest in proportion to its CPU time; a batch is folded in chunks, each through the pacer, and ends as one
fold would have; the poller reads a job that is behind again without waiting for its interval; and a stopped job's
end waits (a bounded time) for events one drain could not read."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pytest

import service.domain.observation_intake as observation_intake_module
import service.runtime as runtime_module
from service.adapters.events_file import EventsFileReader
from service.adapters.store import SqlJobStore
from service.config import Settings
from service.domain.fold_pacer import FOLD_CHUNK_EVENTS, MAX_REST_S, FoldPacer
from service.domain.job_service import JobService
from service.domain.job_service_parts import DEFAULT_HEALTH_POLICY, JobPorts, Pacing
from service.domain.records.models import Caller
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState, utc_now
from service.domain.rounds.progress_poller import ProgressPoller
from service.runtime import RuntimeOverrides, build_runtime
from service.supervisor import Supervisor
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, spec_body
from trainer.contract import JobSpec, RunFinished, RunLayout, TrainStep, dump_event

TEAM_A = Caller(team="team-a", token_id="tok_a")


class PacerClocks:
    """The pacer's CPU clock, wall clock and sleep: a fold "uses" what the test says, a sleep moves the wall."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.wall += seconds

    def pacer(self, share: float) -> FoldPacer:
        return FoldPacer(share, cpu_clock=lambda: self.cpu, monotonic=lambda: self.wall, sleep=self.sleep)


def test_a_fold_earns_a_rest_in_proportion_to_its_cpu_time() -> None:
    clocks = PacerClocks()
    pacer = clocks.pacer(0.25)
    with pacer.fold():
        clocks.cpu += 0.010  # 10 ms of the interpreter
        clocks.wall += 0.010
    with pacer.fold():  # at a quarter of the CPU, 10 ms of work is followed by 30 ms of nothing
        clocks.cpu += 0.002
    assert clocks.slept == [pytest.approx(0.030)]
    clocks.wall += 1.0  # time spent elsewhere (the poll interval) counts as rest
    with pacer.fold():
        pass
    assert len(clocks.slept) == 1


def test_a_full_share_never_rests_and_a_rest_is_bounded() -> None:
    clocks = PacerClocks()
    pacer = clocks.pacer(1.0)
    for _ in range(3):
        with pacer.fold():
            clocks.cpu += 0.5
    assert clocks.slept == []
    slow = clocks.pacer(0.1)
    with slow.fold():
        clocks.cpu += 60.0  # a fold that took a minute of CPU does not stop folding for nine
    with slow.fold():
        pass
    assert clocks.slept == [pytest.approx(MAX_REST_S)]


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5, float("nan")])
def test_a_share_outside_0_to_1_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        FoldPacer(share)


class CountingPacer(FoldPacer):
    def __init__(self) -> None:
        super().__init__(1.0)
        self.folds = 0

    @contextmanager
    def fold(self):  # type: ignore[override]
        self.folds += 1
        with super().fold():
            yield


def _running_job(service: JobService, launcher: FakeLauncher, tmp_path: Path) -> str:
    job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path)))[0].id
    service.apply_observation(launcher.set(job_id, ObservedState.RUNNING))
    return job_id


def _poller(service: JobService, store: SqlJobStore, reader: EventsFileReader) -> ProgressPoller:
    """The supervisor's progress round over the store and reader the service was built with (its default clock and
    health policy)."""
    return ProgressPoller(service, store, reader, clock=utc_now, health_policy=DEFAULT_HEALTH_POLICY)


def _steps(job_id: str, n: int, first_seq: int = 0) -> list[TrainStep]:
    return [TrainStep(seq=first_seq + i, time=T0, job_id=job_id, step=i + 1, total_steps=n, loss=1.0 / (i + 1)) for i in range(n)]


def test_a_batch_is_folded_in_chunks_through_the_pacer_and_ends_as_one_fold_would(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    pacer = CountingPacer()
    service = JobService(JobPorts(store, fake_launcher, fake_progress), pacing=Pacing(fold_pacer=pacer))
    job_id = _running_job(service, fake_launcher, tmp_path)
    n = 3 * FOLD_CHUNK_EVENTS + 5
    for event in _steps(job_id, n):
        fake_progress.add(event)
    pacer.folds = 0
    service.ingest_progress(job_id)
    assert pacer.folds == 4  # 128, 128, 128 and 5: no stretch longer than one chunk
    record = store.get(job_id)
    assert record is not None and record.report.step == n and record.report.last_trainer_seq == n - 1
    assert [p.step for p in store.metric_points(job_id, limit=n + 10)] == list(range(1, n + 1))
    fake_progress.replay_all()  # read again (a restart): the chunks drop what was folded, by seq
    service.ingest_progress(job_id)
    assert len(store.metric_points(job_id, limit=2 * n)) == n


def _write_steps(tmp_path: Path, job_id: str, n: int) -> None:
    path = Path(RunLayout(str(tmp_path / "runs"), job_id).events)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(dump_event(e) + "\n" for e in _steps(job_id, n)))


def test_a_job_behind_is_read_again_at_once_and_the_round_says_so(
    store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = EventsFileReader(max_read_bytes=4096)  # a few events a read: the file is many reads long
    service = JobService(JobPorts(store, fake_launcher, reader))
    job_id = _running_job(service, fake_launcher, tmp_path)
    _write_steps(tmp_path, job_id, 200)
    poller = _poller(service, store, reader)
    assert poller.poll_once() is True  # one read's worth folded, more in the file
    # A job behind is read without asking the source (an object store answers that every few seconds only).
    monkeypatch.setattr(reader, "pending", lambda record: False)
    rounds = 1
    while poller.poll_once():
        rounds += 1
        assert rounds < 200
    record = store.get(job_id)
    assert record is not None and record.report.step == 200 and rounds > 3
    assert poller.poll_once() is False  # caught up: back to asking


def test_the_supervisor_polls_again_at_once_while_a_job_is_behind(store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path) -> None:
    ports = JobPorts(store, fake_launcher, EventsFileReader(max_read_bytes=4096))
    service = JobService(ports)
    job_id = _running_job(service, fake_launcher, tmp_path)
    _write_steps(tmp_path, job_id, 200)
    supervisor = Supervisor(service, ports, progress_poll_interval_s=0.5, active_jobs_reconcile_interval_s=60)
    supervisor._recovered = True  # recovery is another test's; here only what a round asks of its loop
    supervisor._next_reconcile_s = float("inf")
    assert supervisor._recover_or_poll() == 0.0  # behind: the next round now, the pacer sets the pace
    while supervisor._recover_or_poll() == 0.0:
        pass
    assert supervisor._recover_or_poll() is None  # caught up: the loop's own interval again
    record = store.get(job_id)
    assert record is not None and record.report.step == 200


def _flooded_stopped_job(store: SqlJobStore, launcher: FakeLauncher, tmp_path: Path) -> tuple[JobService, EventsFileReader, str]:
    reader = EventsFileReader(max_read_bytes=4096)
    service = JobService(JobPorts(store, launcher, reader))
    job_id = _running_job(service, launcher, tmp_path)
    _write_steps(tmp_path, job_id, 200)
    with Path(RunLayout(str(tmp_path / "runs"), job_id).events).open("a") as f:
        f.write(dump_event(RunFinished(seq=200, time=T0, job_id=job_id, ok=True, exit_code=0)) + "\n")
    return service, reader, job_id


def test_a_stopped_job_with_events_behind_keeps_its_phase_until_they_are_read(
    store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain before a job's end has a time budget (one read here): the observation thread applies every job's
    transitions, and a job that flooded its events file before exiting must not hold it. Its end waits for the poller
    (at its pace), then the reconcile's next look writes it with every event in."""
    monkeypatch.setattr(observation_intake_module, "DRAIN_BUDGET_S", 0.0)
    service, reader, job_id = _flooded_stopped_job(store, fake_launcher, tmp_path)
    stopped = fake_launcher.set(job_id, ObservedState.SUCCEEDED, exit_code=0)
    service.apply_observation(stopped)
    record = store.get(job_id)
    assert record is not None and record.phase is JobPhase.RUNNING and record.report.step < 200  # put off, nothing lost
    poller = _poller(service, store, reader)
    while poller.poll_once():
        pass
    service.apply_observation(stopped)  # as the reconcile observes it again
    record = store.get(job_id)
    assert record is not None and record.phase is JobPhase.SUCCEEDED
    assert record.report.step == 200 and record.report.outcome is not None and record.report.outcome.ok
    assert len(store.metric_points(job_id, limit=500)) == 200


def test_a_jobs_end_is_put_off_for_a_bounded_time_only(
    store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(observation_intake_module, "DRAIN_BUDGET_S", 0.0)
    monkeypatch.setattr(observation_intake_module, "DRAIN_PUT_OFF_MAX_S", 0.0)
    service, _, job_id = _flooded_stopped_job(store, fake_launcher, tmp_path)
    service.apply_observation(fake_launcher.set(job_id, ObservedState.SUCCEEDED, exit_code=0))
    record = store.get(job_id)
    assert record is not None and record.phase is JobPhase.SUCCEEDED and record.report.step < 200  # ended without the rest


@pytest.mark.parametrize("share", [0.1, 0.5, 1.0])
def test_the_share_setting_paces_the_runtimes_folds(
    share: float,
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    settings_factory: Callable[..., Settings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RLJOB_PROGRESS_FOLD_CPU_SHARE reaches the pacer build_runtime gives the job service: each fold of 10 ms of
    CPU (the test's clock) earns 10 ms * (1 - share) / share of rest before the next, and a full share none."""
    clocks = PacerClocks()
    ticks = iter(range(1_000_000))
    clocked = functools.partial(FoldPacer, cpu_clock=lambda: 0.010 * next(ticks), monotonic=lambda: clocks.wall, sleep=clocks.sleep)
    monkeypatch.setattr(runtime_module, "FoldPacer", clocked)  # the runtime's own pacer, on the test's clocks
    monkeypatch.setenv("RLJOB_PROGRESS_FOLD_CPU_SHARE", str(share))
    settings = settings_factory()
    assert settings.progress_fold_cpu_share == share
    runtime = build_runtime(settings, RuntimeOverrides(store=store, launcher=fake_launcher, progress=fake_progress))
    assert runtime.jobs.fold_pacer.share == share
    job_id = _running_job(runtime.jobs, fake_launcher, tmp_path)
    for event in _steps(job_id, 2 * FOLD_CHUNK_EVENTS + 1):
        fake_progress.add(event)
    runtime.jobs.ingest_progress(job_id)  # three folds: the second and third each wait out the rest before them
    rest = 0.010 * (1 - share) / share
    assert clocks.slept == ([] if share == 1.0 else [pytest.approx(rest)] * 2)
    record = store.get(job_id)
    assert record is not None and record.report.step == 2 * FOLD_CHUNK_EVENTS + 1
