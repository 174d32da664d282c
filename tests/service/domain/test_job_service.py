"""JobService with fakes at the launcher and progress ports and a real store (SQLite, PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.records.errors import IdempotencyConflict, JobNotFound, NotCancellable
from service.domain.records.models import Caller
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.rounds.recovery import JobRecovery
from service.domain.views import to_public
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, spec_body
from trainer.contract import (
    ArtifactWritten,
    JobSpec,
    RunFinished,
    RunStarted,
    Stage,
    StageStarted,
    TrainStep,
    describe_exit_code,
)

TEAM_A = Caller(team="team-a", token_id="tok_a")
TEAM_B = Caller(team="team-b", token_id="tok_b")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def service(store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock) -> JobService:
    return JobService(JobPorts(store, fake_launcher, fake_progress), JobPolicies(max_resumes=1), clock=clock)


def _spec(tmp_path: Path, **extra: object) -> JobSpec:
    return JobSpec.model_validate(spec_body(tmp_path, **extra))


def _phases(store: SqlJobStore, job_id: str) -> list[str]:
    return [e.data["phase"] for e in store.events_after(0, job_id=job_id) if e.kind == "phase"]


def _ev(cls: type, job_id: str, seq: int, **fields: object):
    return cls(seq=seq, time=T0 + timedelta(seconds=seq), job_id=job_id, **fields)


def test_submit_stores_queued_then_hands_to_launcher(
    service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path
) -> None:
    record, created = service.submit(TEAM_A, _spec(tmp_path))
    assert created and record.phase is JobPhase.LAUNCHING
    assert record.team == "team-a" and record.spec.team == "team-a"  # team comes from the caller
    assert fake_launcher.launched == [record.id]
    assert _phases(store, record.id) == ["QUEUED", "LAUNCHING"]
    assert record.backend == "fake" and record.object_name == f"fake/{record.id}"
    assert record.created_at == T0


def test_progress_then_success_and_late_events_are_ignored(
    service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, clock: ManualClock, tmp_path: Path
) -> None:
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING, object_name="pid:42"))
    fake_progress.add(_ev(RunStarted, job_id, 0, attempt=1, run_uri="/x"))
    fake_progress.add(_ev(StageStarted, job_id, 1, stage=Stage.TRAIN))
    fake_progress.add(_ev(TrainStep, job_id, 2, step=1, total_steps=4, reward_mean=0.5, reward_std=0.1, kl=0.01, loss=2.0))
    service.ingest_progress(job_id)
    clock.advance(10)
    running = store.get(job_id)
    assert running is not None and running.phase is JobPhase.RUNNING and running.object_name == "pid:42"
    view = to_public(running, T0 + timedelta(seconds=1 + 20))  # train started at T0+1s; 1 of 4 steps in 20 s
    assert (view.stage, view.step, view.total_steps, view.metrics.reward_mean) == (Stage.TRAIN, 1, 4, 0.5)
    assert view.eta_s == pytest.approx(60.0)

    fake_progress.add(_ev(ArtifactWritten, job_id, 3, name="hf_model", uri="/x/hf"))
    fake_progress.add(_ev(RunFinished, job_id, 4, ok=True, exit_code=0))
    service.apply_observation(fake_launcher.set(job_id, ObservedState.SUCCEEDED, exit_code=0))
    done = store.get(job_id)
    assert done is not None and done.phase is JobPhase.SUCCEEDED and done.finished_at == T0 + timedelta(seconds=10)
    assert done.report.artifacts["hf_model"].uri == "/x/hf"  # drained before the terminal phase

    # Late and duplicate input never moves or changes a finished job.
    seq_before = done.last_event_seq
    service.apply_observation(fake_launcher.set(job_id, ObservedState.FAILED, exit_code=70))
    service.apply_observation(fake_launcher.set(job_id, ObservedState.GONE))
    fake_progress.replay_all()
    fake_progress.add(_ev(TrainStep, job_id, 5, step=2, total_steps=4))
    service.ingest_progress(job_id)
    after = store.get(job_id)
    assert after is not None and after.phase is JobPhase.SUCCEEDED and after.report.step == 1
    assert after.last_event_seq == seq_before
    assert _phases(store, job_id) == ["QUEUED", "LAUNCHING", "RUNNING", "SUCCEEDED"]
    assert fake_launcher.launched == [job_id]  # GONE after the end did not relaunch


def test_duplicate_progress_events_are_applied_once(
    service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    for seq in range(3):
        fake_progress.add(_ev(TrainStep, job_id, seq, step=seq + 1, total_steps=3, reward_mean=float(seq)))
    service.ingest_progress(job_id)
    fake_progress.replay_all()  # as after a restart: the whole file again
    service.ingest_progress(job_id)
    assert [p.step for p in store.metric_points(job_id, limit=100)] == [1, 2, 3]
    assert len([e for e in store.events_after(0, job_id=job_id) if e.kind == "progress"]) == 3


def test_failure_message_says_what_happened_and_what_to_do(
    service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    fake_progress.add(_ev(RunFinished, job_id, 0, ok=False, exit_code=70, message="loss is NaN", failed_stage=Stage.TRAIN))
    service.apply_observation(fake_launcher.set(job_id, ObservedState.FAILED, exit_code=70))
    record = store.get(job_id)
    assert record is not None and record.phase is JobPhase.FAILED
    assert record.failure_reason == "NON_RETRYABLE" and record.exit_code == 70
    assert "train stage: loss is NaN" in record.message
    assert describe_exit_code(70) in record.message and f"rljob logs {job_id}" in record.message
    failure = to_public(record, T0).failure
    assert failure is not None and failure.failed_stage == "train"


def test_launch_failure_fails_the_job_with_the_reason(
    service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path
) -> None:
    fake_launcher.fail_launch = "quota exceeded"
    record, _ = service.submit(TEAM_A, _spec(tmp_path))
    assert record.phase is JobPhase.FAILED and record.failure_reason == "LaunchFailed"
    assert "quota exceeded" in record.message
    assert _phases(store, record.id) == ["QUEUED", "LAUNCHING", "FAILED"]


def test_cancel_waits_for_the_workload_to_stop(
    service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path
) -> None:
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    assert service.cancel(TEAM_A, job_id).phase is JobPhase.CANCELLING
    assert fake_launcher.cancelled == [job_id]
    assert service.cancel(TEAM_A, job_id).phase is JobPhase.CANCELLING  # idempotent, no second kill
    assert fake_launcher.cancelled == [job_id]
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))  # still stopping
    assert store.get(job_id).phase is JobPhase.CANCELLING  # type: ignore[union-attr]
    service.apply_observation(fake_launcher.set(job_id, ObservedState.FAILED, exit_code=143))
    assert store.get(job_id).phase is JobPhase.CANCELLED  # type: ignore[union-attr]
    with pytest.raises(NotCancellable):
        service.cancel(TEAM_A, job_id)


def test_other_teams_jobs_do_not_exist(service: JobService, tmp_path: Path) -> None:
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    with pytest.raises(JobNotFound):
        service.get(TEAM_B, job_id)
    with pytest.raises(JobNotFound):
        service.cancel(TEAM_B, job_id)
    assert service.get(Caller(team="ops", token_id="t", admin=True), job_id).id == job_id


def test_idempotency_key(service: JobService, fake_launcher: FakeLauncher, tmp_path: Path) -> None:
    first, created = service.submit(TEAM_A, _spec(tmp_path), "key-1")
    again, created_again = service.submit(TEAM_A, _spec(tmp_path), "key-1")
    assert created and not created_again and again.id == first.id
    assert fake_launcher.launched == [first.id]
    with pytest.raises(IdempotencyConflict):
        service.submit(TEAM_A, _spec(tmp_path, name="other"), "key-1")
    other_team, created_b = service.submit(TEAM_B, _spec(tmp_path), "key-1")  # keys are per team
    assert created_b and other_team.id != first.id


def test_recover_reattaches_resumes_or_fails(service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path) -> None:
    alive, lost, lost_twice, stopping, queued_in_backend = (service.submit(TEAM_A, _spec(tmp_path, name=f"j{i}"))[0].id for i in range(5))
    for job_id in (alive, lost, lost_twice, stopping):
        service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING, object_name=f"pid:{job_id}"))
    service.cancel(TEAM_A, stopping)
    with store.transaction() as tx:  # this one was already resumed once (max_resumes=1)
        rec = tx.get(lost_twice, for_update=True)
        rec.resumes = 1  # type: ignore[union-attr]
        tx.update(rec)  # type: ignore[arg-type]
    # The service restarts: only `alive` still has a process.
    for job_id in (lost, lost_twice, stopping, queued_in_backend):
        fake_launcher.states.pop(job_id)
    fake_launcher.launched.clear()

    JobRecovery(service, store, fake_launcher).recover()

    phases = {j: store.get(j).phase for j in (alive, lost, lost_twice, stopping, queued_in_backend)}  # type: ignore[union-attr]
    assert phases == {
        alive: JobPhase.RUNNING,
        lost: JobPhase.LAUNCHING,
        lost_twice: JobPhase.FAILED,
        stopping: JobPhase.CANCELLED,
        queued_in_backend: JobPhase.LAUNCHING,
    }
    assert "re-attached" in store.get(alive).message  # type: ignore[union-attr]
    assert sorted(fake_launcher.launched) == sorted([lost, queued_in_backend])  # each exactly once
    assert store.get(lost).resumes == 1 and store.get(queued_in_backend).resumes == 0  # type: ignore[union-attr]
    failed = store.get(lost_twice)
    assert failed is not None and failed.failure_reason == "ResumeLimit" and "submit the job again" in failed.message
    assert _phases(store, lost) == ["QUEUED", "LAUNCHING", "RUNNING", "LAUNCHING"]


def test_job_that_finished_while_the_service_was_down(
    service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    fake_progress.add(_ev(TrainStep, job_id, 0, step=4, total_steps=4))
    fake_launcher.set(job_id, ObservedState.SUCCEEDED, exit_code=0)
    JobRecovery(service, store, fake_launcher).recover()
    record = store.get(job_id)
    assert record is not None and record.phase is JobPhase.SUCCEEDED and record.report.step == 4


def test_metric_points_are_the_newest_in_order(
    service: JobService, store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    for seq in range(5):
        fake_progress.add(_ev(TrainStep, job_id, seq, step=seq + 1, total_steps=5))
    service.ingest_progress(job_id)
    assert [p.step for p in store.metric_points(job_id, limit=3)] == [3, 4, 5]


def test_a_cancel_racing_the_end_of_the_job_is_refused(
    service: JobService,
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The job succeeds after cancel() read it as RUNNING and before its write: found by bench/control_plane/kill_loop.py,
    # where such a cancel was answered 200 with phase SUCCEEDED.
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    read = service.get

    def read_then_job_ends(caller: Caller, jid: str) -> object:
        record = read(caller, jid)
        service.apply_observation(fake_launcher.set(jid, ObservedState.SUCCEEDED, exit_code=0))
        return record

    monkeypatch.setattr(service, "get", read_then_job_ends)
    with pytest.raises(NotCancellable):
        service.cancel(TEAM_A, job_id)
    assert store.get(job_id).phase is JobPhase.SUCCEEDED  # type: ignore[union-attr]
    assert fake_launcher.cancelled == []
