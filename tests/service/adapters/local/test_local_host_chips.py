"""The machine's TPU chips on the real LocalProcessLauncher, with real child processes running harness/fake_trainer.py:
on the lent v5e machine (one chip; libtpu lets one process hold it) a second TPU job is queued, not launched, while a
cpu job starts beside the first, and it starts when the first ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.adapters.local import LocalProcessLauncher
from service.adapters.local.host_tpu import HostTpu
from service.domain.records.models import QueueStatus
from service.domain.records.ports import ObservedState
from tests.service.conftest import MakeLocalLauncher
from tests.service.observation_recorder import Recorder
from tests.service.service_helpers import spec_body, wait_until
from trainer.contract import JobSpec

LENT_V5E = HostTpu(1, "v5e-1", "TPU_ACCELERATOR_TYPE says v5litepod-4 (a v5e-4 host; TPU_TOPOLOGY=2x2), this process sees 1 chip")


@pytest.fixture
def v5e_launcher(make_local_launcher: MakeLocalLauncher) -> tuple[LocalProcessLauncher, Recorder]:
    return make_local_launcher(max_concurrent=8, probe_tpu=lambda: LENT_V5E)


def _spec(tmp_path: Path, *, accelerator: str, gated: bool = False) -> JobSpec:
    hardware = {"accelerator": accelerator, "chips_per_vm": 1} if accelerator != "cpu" else {"accelerator": "cpu", "rollout_engine": "jax"}
    return JobSpec.model_validate(spec_body(tmp_path, labels={"fake-gate": "true"} if gated else {}, team="team-a", hardware=hardware))


def _started(tmp_path: Path, job_id: str) -> bool:
    return (tmp_path / "runs" / job_id / "starts").exists()


def test_a_second_tpu_job_waits_for_the_chip_and_starts_when_it_is_free(v5e_launcher, tmp_path: Path) -> None:
    launcher, rec = v5e_launcher
    first, second, cpu = "rl-hostchips001", "rl-hostchips002", "rl-hostchips003"
    launcher.launch(first, _spec(tmp_path, accelerator="v5e-1", gated=True))
    assert launcher.launch(second, _spec(tmp_path, accelerator="v5e-1")).object_name == "queued"
    launcher.launch(cpu, _spec(tmp_path, accelerator="cpu", gated=True))

    assert rec.states(first) == [ObservedState.RUNNING] and rec.states(cpu) == [ObservedState.RUNNING]
    waiting = launcher.observe(second)
    assert waiting.state is ObservedState.QUEUED
    assert waiting.queue == QueueStatus(
        name="team/team-a", position=1, reason="HostChips", message=f"1 of this machine's 1 TPU chip(s) held by {first}; this job needs 1"
    )
    assert not (tmp_path / "jobs" / second / "process.json").exists() and not _started(tmp_path, second)  # never launched

    wait_until((tmp_path / "runs" / first / "starts").exists)
    (tmp_path / "runs" / first / "gate").touch()  # the first TPU job ends: its chip is free
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states(second))
    assert rec.states(second) == [ObservedState.QUEUED, ObservedState.RUNNING, ObservedState.SUCCEEDED]
    assert rec.states(cpu)[-1] is ObservedState.RUNNING  # the cpu job ran beside both, still at its gate
    (tmp_path / "runs" / cpu / "gate").touch()
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states(cpu))
