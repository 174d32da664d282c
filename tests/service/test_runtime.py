"""The runtime without ASGI (service/runtime.py): built from settings on SQLite, started, used through its
job service, stopped within its bounds, leaving no background thread behind."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from service.adapters.leader_locks import StateDirInUse
from service.config import Settings
from service.domain.records.models import Caller
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.runtime import Runtime, RuntimeOverrides, build_runtime
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import spec_body
from trainer.contract import JobSpec

CALLER = Caller(team="team-a", token_id="t")


def _service_threads() -> set[str]:
    """The service's own background threads (the runtime's loops; not the thread pool's idle workers)."""
    return {t.name for t in threading.enumerate() if t.name.startswith("rljob-") or t.name == "local-launcher"}


async def _until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_a_runtime_starts_takes_a_job_and_stops_without_asgi(settings_factory: Callable[..., Settings], tmp_path: Path) -> None:
    launcher = FakeLauncher()
    runtime = build_runtime(settings_factory(), RuntimeOverrides(launcher=launcher, progress=FakeProgress()))
    assert runtime.owns_store and runtime.store.url.startswith("sqlite")  # type: ignore[attr-defined]
    before = _service_threads()

    async def scenario() -> None:
        await runtime.start()
        try:
            assert runtime.leadership.leads  # the sole process on its state directory leads at once
            await _until(lambda: runtime.not_ready_reason() is None)
            assert {"rljob-observations", "rljob-recovery"} <= _service_threads()
            spec = JobSpec.model_validate(spec_body(tmp_path))
            record, created = await asyncio.to_thread(runtime.jobs.submit, CALLER, spec)
            assert created
            await _until(lambda: record.id in launcher.launched)
            launcher.emit(record.id, ObservedState.RUNNING)  # through the supervisor's observation loop
            await _until(lambda: runtime.jobs.get(CALLER, record.id).phase is JobPhase.RUNNING)
        finally:
            started = time.monotonic()
            await runtime.stop()
            assert time.monotonic() - started < 15  # every join is bounded

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert _service_threads() == before
    assert not runtime.leadership.leads


def test_a_second_runtime_on_the_same_state_directory_refuses_to_start_and_leaves_nothing_running(
    settings_factory: Callable[..., Settings],
) -> None:
    def make() -> Runtime:
        return build_runtime(settings_factory(), RuntimeOverrides(launcher=FakeLauncher(), progress=FakeProgress()))

    first, second = make(), make()
    before = _service_threads()

    async def scenario() -> None:
        await first.start()
        try:
            with pytest.raises(StateDirInUse):
                await second.start()
            assert not second.leadership.leads  # what the failed start had begun is stopped again
        finally:
            await first.stop()
        third = make()  # the first let go of the state directory when it stopped
        await third.start()
        await third.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert _service_threads() == before
