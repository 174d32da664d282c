"""A fault that repeats each round is logged once when it starts and once when it ends (service/fault_log.py). With
the state disk full the progress poller logged a traceback per poll, 13 in 2.8 s; here the same fault, 13 rounds of
it, through the poller's per-job guard and the supervisor's round guard."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import DEFAULT_HEALTH_POLICY, JobPorts
from service.domain.records.models import Caller, JobRecord
from service.domain.records.ports import ObservedState, utc_now
from service.domain.rounds.progress_poller import ProgressPoller
from service.supervisor import Supervisor
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import spec_body
from trainer.contract import JobSpec

ROUNDS = 13


class DiskFull:
    """A method that fails as a write to a full disk does while `full` is set."""

    def __init__(self) -> None:
        self.full = True

    def __call__(self, *args: object, **kwargs: object) -> bool:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return False


def _tracebacks(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.exc_info is not None]


def _said(caplog: pytest.LogCaptureFixture, logger: str, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and words in r.getMessage()]


@pytest.fixture
def ports(store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress) -> JobPorts:
    return JobPorts(store, fake_launcher, fake_progress)


@pytest.fixture
def jobs(ports: JobPorts) -> JobService:
    return JobService(ports)


@pytest.fixture
def poller(jobs: JobService, ports: JobPorts) -> ProgressPoller:
    return ProgressPoller(jobs, ports.store, ports.progress, clock=utc_now, health_policy=DEFAULT_HEALTH_POLICY)


def _running_job(jobs: JobService, tmp_path: Path) -> str:
    job_id = jobs.submit(Caller(team="team-a", token_id="t"), JobSpec.model_validate(spec_body(tmp_path)))[0].id
    jobs.apply_observation(jobs.launcher.set(job_id, ObservedState.RUNNING))  # type: ignore[attr-defined]
    return job_id


def test_the_progress_poller_logs_a_jobs_fault_once_and_its_recovery_once(
    jobs: JobService, poller: ProgressPoller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = _running_job(jobs, tmp_path)
    disk = DiskFull()
    monkeypatch.setattr(jobs.progress, "pending", disk)  # asked every round: the job's events file
    logger = "service.domain.rounds.progress_poller"
    caplog.set_level(logging.INFO, logger=logger)
    for _ in range(ROUNDS):
        poller.poll_once()
    assert len(_tracebacks(caplog, logger)) == 1  # was one per round
    assert "No space left on device" in caplog.text and job_id in caplog.text

    disk.full = False
    poller.poll_once()
    poller.poll_once()
    assert _said(caplog, logger, "works again") == [f"reading progress of {job_id} works again (after {ROUNDS} failed round(s))"]

    disk.full = True  # a new fault after the recovery is said again
    poller.poll_once()
    assert len(_tracebacks(caplog, logger)) == 2


def test_a_different_fault_of_the_same_job_is_logged_too(
    jobs: JobService, poller: ProgressPoller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    _running_job(jobs, tmp_path)
    monkeypatch.setattr(jobs.progress, "pending", DiskFull())
    poller.poll_once()
    poller.poll_once()

    def unreadable(record: JobRecord) -> bool:
        raise ValueError("not an events file")

    monkeypatch.setattr(jobs.progress, "pending", unreadable)
    poller.poll_once()
    poller.poll_once()
    assert len(_tracebacks(caplog, "service.domain.rounds.progress_poller")) == 2


def test_the_supervisors_round_logs_a_fault_once_and_its_recovery_once(
    jobs: JobService, ports: JobPorts, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    supervisor = Supervisor(jobs, ports, progress_poll_interval_s=0.01, active_jobs_reconcile_interval_s=0.0)
    disk = DiskFull()
    monkeypatch.setattr(supervisor, "poll_progress_once", disk)
    monkeypatch.setattr(supervisor.active_jobs, "reconcile_once", disk)
    logger = "service.supervisor"
    caplog.set_level(logging.INFO, logger=logger)
    for _ in range(ROUNDS):
        supervisor._poll_round()
    assert len(_tracebacks(caplog, logger)) == 2  # the poll's fault and the reconcile's, each once
    disk.full = False
    supervisor._poll_round()
    supervisor._poll_round()
    assert _said(caplog, logger, "works again") == [
        f"polling progress works again (after {ROUNDS} failed round(s))",
        f"the reconcile works again (after {ROUNDS} failed round(s))",
    ]
