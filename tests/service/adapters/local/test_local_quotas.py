"""Team quotas and priorities on the LocalProcessLauncher, with real child processes running
harness/fake_trainer.py: who waits, with which reason and place in line, and who starts when a
job ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.adapters.local import LocalProcessLauncher
from service.adapters.local.admission import TeamLimits, TeamQuotas
from service.adapters.local.host_tpu import HostTpu
from service.domain.records.errors import InvalidRequest, LaunchFailed
from service.domain.records.models import QueueStatus
from service.domain.records.ports import ObservedState
from tests.service.conftest import MakeLocalLauncher
from tests.service.observation_recorder import Recorder
from tests.service.service_helpers import spec_body, wait_until
from trainer.contract import JobSpec
from trainer.contract.accelerators.tpu import tpu_slice

V6E8_HOST = HostTpu(chips=8, accelerator_type="v6e-8", type_source="test")


@pytest.fixture
def make_launcher(make_local_launcher: MakeLocalLauncher) -> MakeLocalLauncher:
    def make(quotas: TeamQuotas, max_concurrent: int = 8) -> tuple[LocalProcessLauncher, Recorder]:
        return make_local_launcher(max_concurrent=max_concurrent, quotas=quotas, probe_tpu=lambda: V6E8_HOST)

    return make


def _spec(tmp_path: Path, team: str, *, gated: bool = False, priority: str = "normal", accelerator: str = "cpu") -> JobSpec:
    tpu = tpu_slice(accelerator)
    hardware = {"accelerator": accelerator, "chips_per_vm": tpu.chips_per_vm} if tpu else {"accelerator": "cpu", "rollout_engine": "jax"}
    labels = {"fake-gate": "true"} if gated else {}
    body = spec_body(tmp_path, labels=labels, team=team, priority=priority, hardware=hardware)
    return JobSpec.model_validate(body)


def _open_gate(tmp_path: Path, job_id: str) -> None:
    root = tmp_path / "runs" / job_id
    wait_until((root / "starts").exists)
    (root / "gate").touch()


def _started(tmp_path: Path, job_id: str) -> bool:
    return (tmp_path / "runs" / job_id / "starts").exists()


def test_a_team_over_its_job_limit_waits_in_line_while_another_team_starts(make_launcher, tmp_path: Path) -> None:
    launcher, rec = make_launcher(TeamQuotas(default=TeamLimits(max_jobs=2)))
    for job_id in ("rl-quotaa00001", "rl-quotaa00002"):
        launcher.launch(job_id, _spec(tmp_path, "team-a", gated=True))
    assert launcher.launch("rl-quotaa00003", _spec(tmp_path, "team-a")).object_name == "queued"
    launcher.launch("rl-quotab00001", _spec(tmp_path, "team-b", gated=True))

    assert rec.states("rl-quotab00001") == [ObservedState.RUNNING]
    waiting = launcher.observe("rl-quotaa00003")
    assert waiting.state is ObservedState.QUEUED
    assert waiting.queue == QueueStatus(
        name="team/team-a", position=1, reason="TeamJobLimit", message="team-a runs 2 of its 2 concurrent jobs"
    )
    assert rec.states("rl-quotaa00003") == [ObservedState.QUEUED] and not _started(tmp_path, "rl-quotaa00003")

    _open_gate(tmp_path, "rl-quotaa00001")  # a team-a job ends: the waiting one takes its place
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states("rl-quotaa00003"))
    assert rec.states("rl-quotaa00003") == [ObservedState.QUEUED, ObservedState.RUNNING, ObservedState.SUCCEEDED]
    assert rec.states("rl-quotaa00002")[-1] is ObservedState.RUNNING  # still held at its gate
    for job_id in ("rl-quotaa00002", "rl-quotab00001"):
        _open_gate(tmp_path, job_id)


def test_a_high_priority_job_jumps_the_line_and_the_others_are_told_their_new_place(make_launcher, tmp_path: Path) -> None:
    launcher, rec = make_launcher(TeamQuotas(default=TeamLimits(max_jobs=1)))
    running, normal, low, high = "rl-priority0001", "rl-priority0002", "rl-priority0003", "rl-priority0004"
    launcher.launch(running, _spec(tmp_path, "team-a", gated=True))
    launcher.launch(normal, _spec(tmp_path, "team-a", gated=True))
    launcher.launch(low, _spec(tmp_path, "team-a", priority="low"))
    launcher.launch(high, _spec(tmp_path, "team-a", priority="high", gated=True))
    assert rec.queues(high) == [(1, "TeamJobLimit")]
    assert rec.queues(normal) == [(1, "TeamJobLimit"), (2, "TeamJobLimit")]  # re-reported when moved back
    assert rec.queues(low) == [(2, "TeamJobLimit"), (3, "TeamJobLimit")]

    _open_gate(tmp_path, running)
    wait_until(lambda: ObservedState.RUNNING in rec.states(high))
    assert not _started(tmp_path, normal)
    assert rec.queues(normal)[-1] == (1, "TeamJobLimit") and rec.queues(low)[-1] == (2, "TeamJobLimit")
    _open_gate(tmp_path, high)
    wait_until(lambda: ObservedState.RUNNING in rec.states(normal))
    assert not _started(tmp_path, low)
    _open_gate(tmp_path, normal)
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states(low))


def test_a_teams_chip_limit_holds_back_a_tpu_job_but_lets_its_cpu_job_run(make_launcher, tmp_path: Path) -> None:
    launcher, rec = make_launcher(TeamQuotas(teams={"team-a": TeamLimits(max_chips=8)}))
    launcher.launch("rl-chips000001", _spec(tmp_path, "team-a", gated=True, accelerator="v6e-8"))
    launcher.launch("rl-chips000002", _spec(tmp_path, "team-a", accelerator="v6e-8"))
    launcher.launch("rl-chips000003", _spec(tmp_path, "team-a"))  # cpu: holds no chips
    waiting = launcher.observe("rl-chips000002")
    assert waiting.queue == QueueStatus(
        name="team/team-a",
        position=1,
        reason="TeamChipLimit",
        message="team-a holds 8 of its 8 TPU chips and this job needs 8",
    )
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states("rl-chips000003"))
    assert not _started(tmp_path, "rl-chips000002")
    _open_gate(tmp_path, "rl-chips000001")
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states("rl-chips000002"))


def test_a_job_needing_more_chips_than_its_team_may_hold_is_refused_at_submit(make_launcher, tmp_path: Path) -> None:
    launcher, _ = make_launcher(TeamQuotas(teams={"team-a": TeamLimits(max_chips=4)}))
    with pytest.raises(InvalidRequest) as refused:
        launcher.check_submittable(_spec(tmp_path, "team-a", accelerator="v6e-8"))
    assert refused.value.loc == ("body", "hardware", "accelerator")
    assert "needs 8 TPU chips and team team-a may hold at most 4" in str(refused.value)
    launcher.check_submittable(_spec(tmp_path, "team-b", accelerator="v6e-8"))  # no limit of its own
    # Stored before the team's limit shrank: refused at launch with the same reason, nothing started.
    with pytest.raises(LaunchFailed, match="may hold at most 4"):
        launcher.launch("rl-toobig00001", _spec(tmp_path, "team-a", accelerator="v6e-8"))
    assert not (tmp_path / "jobs" / "rl-toobig00001").exists()


def test_cancel_of_a_waiting_job_moves_the_ones_behind_it_up(make_launcher, tmp_path: Path) -> None:
    launcher, rec = make_launcher(TeamQuotas(default=TeamLimits(max_jobs=1)))
    launcher.launch("rl-cancelq0001", _spec(tmp_path, "team-a", gated=True))
    launcher.launch("rl-cancelq0002", _spec(tmp_path, "team-a"))
    launcher.launch("rl-cancelq0003", _spec(tmp_path, "team-a"))
    launcher.cancel("rl-cancelq0002")
    assert rec.states("rl-cancelq0002") == [ObservedState.QUEUED, ObservedState.GONE]
    assert rec.queues("rl-cancelq0003") == [(2, "TeamJobLimit"), (1, "TeamJobLimit")]
    _open_gate(tmp_path, "rl-cancelq0001")
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states("rl-cancelq0003"))
