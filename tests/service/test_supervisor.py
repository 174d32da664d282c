"""Supervisor: recovery and the poll/reconcile loop survive database errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from service.domain.records.models import Caller
from service.supervisor import Supervisor
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import spec_body, wait_until
from trainer.contract import JobSpec


class Flaky:
    """Wraps a store method: the first `failures` calls raise, later ones pass through."""

    def __init__(self, real: Callable[..., object], failures: int) -> None:
        self.real, self.failures, self.calls = real, failures, 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("database went away")
        return self.real(*args, **kwargs)


@pytest.fixture
def supervisor(store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress):
    ports = JobPorts(store, fake_launcher, fake_progress)
    sup = Supervisor(
        JobService(ports),
        ports,
        progress_poll_interval_s=0.01,
        active_jobs_reconcile_interval_s=0.01,
        recovery_retry_s=0.01,
        recovery_retry_max_s=0.02,
    )
    yield sup
    sup.stop()


def test_stop_wakes_the_observation_loop_instead_of_waiting_out_its_get(supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The observation loop blocks in the queue's get; stop() puts a wake-up there. With a get that would wait 60 s
    and loops joined for at most 10 s, every loop thread has ended when stop() returns only if it was woken."""
    import service.supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "OBSERVATION_WAIT_S", 60.0)
    supervisor.start()
    wait_until(supervisor.ready.is_set, timeout_s=10)
    loops = list(supervisor._loops)
    supervisor.stop()
    assert loops and not any(loop.running for loop in loops)


def test_recovery_is_retried_until_the_database_answers(
    supervisor: Supervisor, store: SqlJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky = Flaky(store.list_active, failures=3)
    monkeypatch.setattr(store, "list_active", flaky)
    supervisor.start()
    wait_until(supervisor.ready.is_set, timeout_s=10)
    assert flaky.calls >= 4 and supervisor.recovery_error is None


def test_poll_and_reconcile_survive_errors(
    supervisor: Supervisor,
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    supervisor.jobs.submit(Caller(team="team-a", token_id="t"), JobSpec.model_validate(spec_body(tmp_path)))
    supervisor.start()
    wait_until(supervisor.ready.is_set, timeout_s=10)
    flaky_active = Flaky(store.list_active, failures=5)
    monkeypatch.setattr(store, "list_active", flaky_active)  # both the poller and the reconcile use it
    wait_until(lambda: flaky_active.calls > 15, timeout_s=10)  # still polling after the failures
    assert supervisor._loops[1].running
