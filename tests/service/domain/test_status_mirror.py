"""Mirroring phase/stage/progress onto the workload: the throttle, failure handling, and how the job
service wires an optional `StatusMirror` launcher (the Kubernetes one is tested on kmock in
tests/k8s/test_service_integration.py)."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts, Pacing
from service.domain.records.models import Caller, QueueStatus
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState, StatusMirror
from service.domain.status_mirror import MirroredStatus, StatusMirrorWorker
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import spec_body, wait_until
from trainer.contract import JobSpec, Stage, StageStarted, TrainStep

JOB = "rl-000000000001"


class RecordingMirror:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None, int | None, int | None]] = []
        self.queue_calls: list[tuple[str, int | None, str | None]] = []
        self.threads: list[str] = []
        self.fail = False
        self.present = True

    def mirror_status(
        self, job_id, phase, stage=None, step=None, total=None, *, queue_position=None, queue_reason=None, placement=None
    ) -> bool:
        self.threads.append(threading.current_thread().name)
        if self.fail:
            raise RuntimeError("API server unavailable")
        self.calls.append((job_id, phase, stage, step, total))
        self.queue_calls.append((phase, queue_position, queue_reason))
        return self.present


class MirroringLauncher(FakeLauncher, RecordingMirror):
    """The fake launcher plus the optional capability, as the Kubernetes launcher has it."""

    def __init__(self) -> None:
        FakeLauncher.__init__(self)
        RecordingMirror.__init__(self)


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _status(step: int | None, *, phase: str = "running", stage: str | None = "train", total: int = 100) -> MirroredStatus:
    return MirroredStatus(phase, stage, step, total, terminal=phase in ("succeeded", "failed", "cancelled"))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def worker(clock: Clock) -> tuple[StatusMirrorWorker, RecordingMirror]:
    mirror = RecordingMirror()
    return StatusMirrorWorker(mirror, every_steps=10, interval_s=30.0, monotonic=clock), mirror


def test_phase_and_stage_changes_go_at_once_progress_is_throttled(worker, clock: Clock) -> None:
    w, mirror = worker
    w.offer(JOB, _status(1))
    assert w.flush_once() is None and mirror.calls[-1] == (JOB, "running", "train", 1, 100)
    w.offer(JOB, _status(5))  # 4 steps and no time later: held back
    assert w.flush_once() == pytest.approx(30.0) and len(mirror.calls) == 1
    w.offer(JOB, _status(11))  # 10 steps since the last write: due
    w.flush_once()
    assert mirror.calls[-1][3] == 11
    w.offer(JOB, _status(12, stage="export"))  # a stage change is never held back
    w.flush_once()
    assert mirror.calls[-1][2:4] == ("export", 12)
    w.offer(JOB, _status(12, stage="export"))  # nothing new: dropped, not queued
    assert w.flush_once() is None and len(mirror.calls) == 3


def test_held_back_progress_is_sent_once_its_interval_has_passed(worker, clock: Clock) -> None:
    w, mirror = worker
    w.offer(JOB, _status(1))
    w.flush_once()
    w.offer(JOB, _status(2))
    clock.now_s += 12
    assert w.flush_once() == pytest.approx(18.0) and len(mirror.calls) == 1
    clock.now_s += 18  # no new offer: the held-back value still goes out, so the annotation is not stale
    assert w.flush_once() is None and mirror.calls[-1][3] == 2


def test_terminal_phase_is_sent_and_the_job_forgotten(worker, clock: Clock) -> None:
    w, mirror = worker
    w.offer(JOB, _status(3))
    w.flush_once()
    w.offer(JOB, _status(4, phase="succeeded"))
    w.flush_once()
    assert mirror.calls[-1][1] == "succeeded"
    assert JOB not in w._sent  # bounded memory: finished jobs leave no state behind


def test_a_failing_mirror_is_logged_and_retried_never_raised(worker, caplog) -> None:
    w, mirror = worker
    mirror.fail = True
    w.offer(JOB, _status(1))
    with caplog.at_level(logging.WARNING):
        w.flush_once()
    assert "could not mirror" in caplog.text and "API server unavailable" in caplog.text
    mirror.fail = False
    w.offer(JOB, _status(2))  # not recorded as sent, so the next offer goes out at once
    w.flush_once()
    assert mirror.calls == [(JOB, "running", "train", 2, 100)]


def test_background_thread_sends_offers_and_stops(clock: Clock) -> None:
    mirror = RecordingMirror()
    w = StatusMirrorWorker(mirror, every_steps=1, interval_s=30.0)
    w.start()
    try:
        w.offer(JOB, _status(1))
        wait_until(lambda: len(mirror.calls) == 1, timeout_s=5)
        w.offer(JOB, _status(2, phase="failed"))
        wait_until(lambda: len(mirror.calls) == 2, timeout_s=5)
    finally:
        w.stop()
    assert set(mirror.threads) == {"rljob-status-mirror"}


def _event(cls: type, seq: int, **fields: object):
    return cls(seq=seq, time=datetime.now(UTC), job_id=JOB, **fields)


def test_job_service_mirrors_committed_changes_of_a_capable_launcher(store, fake_progress: FakeProgress, tmp_path: Path) -> None:
    launcher = MirroringLauncher()
    assert isinstance(launcher, StatusMirror) and not isinstance(FakeLauncher(), StatusMirror)
    jobs = JobService(JobPorts(store, launcher, fake_progress), pacing=Pacing(mirror_every_steps=5), id_factory=lambda: JOB)
    assert JobService(JobPorts(store, FakeLauncher(), fake_progress)).status_mirror is None
    jobs.submit(Caller("team-a", "tok_1"), JobSpec.model_validate(spec_body(tmp_path)))
    jobs.apply_observation(launcher.set(JOB, ObservedState.RUNNING, message="running"))
    fake_progress.add(_event(StageStarted, 0, stage=Stage.TRAIN))
    fake_progress.add(_event(TrainStep, 1, step=3, total_steps=20))
    jobs.ingest_progress(JOB)
    assert launcher.calls == []  # offered, not sent: the writer never calls the launcher itself
    jobs.status_mirror.flush_once()
    assert launcher.calls == [(JOB, "running", "train", 3, 20)]

    launcher.fail = True  # a broken API server must not fail the job or its progress
    fake_progress.add(_event(TrainStep, 2, step=9, total_steps=20))
    jobs.ingest_progress(JOB)
    jobs.status_mirror.flush_once()
    jobs.apply_observation(launcher.set(JOB, ObservedState.SUCCEEDED, exit_code=0))
    assert store.get(JOB).phase.value == "SUCCEEDED" and store.get(JOB).report.step == 9
    launcher.fail = False
    jobs.status_mirror.flush_once()
    assert launcher.calls[-1] == (JOB, "succeeded", "train", 9, 20)


def test_a_queued_jobs_place_and_reason_are_sent_at_once_and_cleared_when_it_leaves(worker) -> None:
    w, mirror = worker

    def queued(position: int) -> MirroredStatus:
        return MirroredStatus("queued", None, None, None, queue_position=position, queue_reason="WaitingForQuota")

    w.offer(JOB, queued(3))
    w.flush_once()
    w.offer(JOB, queued(2))  # no step moved and no time passed: a new place in line still goes out
    w.flush_once()
    w.offer(JOB, MirroredStatus("launching", None, None, None))
    w.flush_once()
    assert mirror.queue_calls == [("queued", 3, "WaitingForQuota"), ("queued", 2, "WaitingForQuota"), ("launching", None, None)]


def test_mirrored_status_of_a_record_carries_its_queue_only_while_queued(store, tmp_path: Path) -> None:
    jobs = JobService(JobPorts(store, FakeLauncher(), FakeProgress()), id_factory=lambda: JOB)
    record, _ = jobs.submit(Caller("team-a", "tok_1"), JobSpec.model_validate(spec_body(tmp_path)))
    record.queue = QueueStatus(name="ml-tpu", position=4, reason="WaitingForQuota")
    record.phase = JobPhase.QUEUED
    status = MirroredStatus.of(record)
    assert (status.phase, status.queue_position, status.queue_reason) == ("queued", 4, "WaitingForQuota")
    record.phase = JobPhase.LAUNCHING
    assert (MirroredStatus.of(record).queue_position, MirroredStatus.of(record).queue_reason) == (None, None)
