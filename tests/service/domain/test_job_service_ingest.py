"""JobService: no trainer event is lost (failed folds, big files), QUEUED jobs are not stranded,
and a GONE about a replaced workload does not spend a resume."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import service.domain.observation_intake as observation_intake_module
from service.adapters.events_file import MAX_READ_BYTES, EventsFileReader
from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts
from service.domain.records.models import Caller
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.rounds.active_jobs_reconciler import ActiveJobsReconciler
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, ManualClock, spec_body
from trainer.contract import ArtifactWritten, JobSpec, RunFinished, RunLayout, TrainStep, dump_event

TEAM_A = Caller(team="team-a", token_id="tok_a")


def _spec(tmp_path: Path) -> JobSpec:
    return JobSpec.model_validate(spec_body(tmp_path))


def _ev(cls: type, job_id: str, seq: int, **fields: object):
    return cls(seq=seq, time=T0 + timedelta(seconds=seq), job_id=job_id, **fields)


def test_a_failing_fold_loses_no_events(
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    fake_progress.add(_ev(TrainStep, job_id, 0, step=1, total_steps=2, loss=1.0))
    real_fold = observation_intake_module.fold_events

    def broken_fold(record, events):
        raise ConnectionError("database went away mid-fold")

    monkeypatch.setattr(observation_intake_module, "fold_events", broken_fold)
    with pytest.raises(ConnectionError):
        service.ingest_progress(job_id)
    monkeypatch.setattr(observation_intake_module, "fold_events", real_fold)
    service.ingest_progress(job_id)
    assert [p.step for p in store.metric_points(job_id, limit=10)] == [1]


def test_a_big_events_file_is_drained_before_the_terminal_phase(store: SqlJobStore, fake_launcher: FakeLauncher, tmp_path: Path) -> None:
    service = JobService(JobPorts(store, fake_launcher, EventsFileReader()))  # a fresh reader: as after a restart
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING))
    events = Path(RunLayout(str(tmp_path / "runs"), job_id).events)
    events.parent.mkdir(parents=True)
    padding = '{"type": "from_a_newer_trainer", "pad": "' + "x" * 1000 + '"}\n'  # skipped, but must be read past
    with events.open("w") as f:
        f.write(padding * (MAX_READ_BYTES * 5 // 2 // len(padding)))  # ~10 MiB: three capped reads
        f.write(dump_event(_ev(ArtifactWritten, job_id, 1, name="hf_model", uri="/x/hf")) + "\n")
        f.write(dump_event(_ev(RunFinished, job_id, 2, ok=True, exit_code=0)) + "\n")
    service.apply_observation(fake_launcher.set(job_id, ObservedState.SUCCEEDED, exit_code=0))
    done = store.get(job_id)
    assert done is not None and done.phase is JobPhase.SUCCEEDED
    assert done.report.outcome is not None and done.report.outcome.ok is True
    assert done.report.artifacts["hf_model"].uri == "/x/hf"


def test_reconcile_launches_a_job_stranded_in_queued(
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ManualClock()
    service = JobService(JobPorts(store, fake_launcher, fake_progress), clock=clock)
    reconcile = ActiveJobsReconciler(service, store, fake_launcher, clock=clock, queued_relaunch_after_s=5)
    monkeypatch.setattr(service, "launch", lambda job_id: None)  # the hand-over after storing never happened
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    monkeypatch.undo()
    assert store.get(job_id).phase is JobPhase.QUEUED  # type: ignore[union-attr]
    reconcile.reconcile_once()
    assert store.get(job_id).phase is JobPhase.QUEUED and fake_launcher.launched == []  # type: ignore[union-attr]
    clock.now += timedelta(seconds=6)
    reconcile.reconcile_once()
    assert store.get(job_id).phase is JobPhase.LAUNCHING  # type: ignore[union-attr]
    assert fake_launcher.launched == [job_id]


def test_a_gone_about_a_replaced_workload_spends_no_resume(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress), JobPolicies(max_resumes=1))
    job_id = service.submit(TEAM_A, _spec(tmp_path))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING, object_name="pid:1"))
    gone_1 = fake_launcher.set(job_id, ObservedState.GONE, object_name="pid:1", message="killed")
    service.apply_observation(gone_1)  # resume 1 of 1: relaunched
    service.apply_observation(fake_launcher.set(job_id, ObservedState.RUNNING, object_name="pid:2"))
    service.apply_observation(gone_1)  # late (e.g. read by the reconcile before the relaunch)
    record = store.get(job_id)
    assert record is not None and record.phase is JobPhase.RUNNING and record.resumes == 1
    assert record.object_name == "pid:2"
    service.apply_observation(fake_launcher.set(job_id, ObservedState.GONE, object_name="pid:2"))
    assert store.get(job_id).failure_reason == "ResumeLimit"  # type: ignore[union-attr]
