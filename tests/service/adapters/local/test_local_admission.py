"""The local launcher's admission policy (service/adapters/local/admission.py) and its settings:
team job and chip limits, priorities, the machine's slots, and places in line. Pure: no processes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from service.adapters.launchers import team_quotas
from service.adapters.local.admission import Admission, JobClaim, TeamLimits, TeamQuotas, admit, chips_of, never_fits
from service.cli.client import CliExit
from service.cli.main import app as cli
from service.config import Settings
from service.domain.records.models import QueueStatus

TWO_JOBS_EACH = TeamQuotas(default=TeamLimits(max_jobs=2))


def claim(job_id: str, team: str = "team-a", *, chips: int = 0, priority: str = "normal", seq: int = 0) -> JobClaim:
    return JobClaim(job_id, team, chips, priority, seq)


def answers(waiting: list[JobClaim], running: list[JobClaim], quotas: TeamQuotas, slots: int = 8) -> dict[str, QueueStatus | None]:
    return {a.job_id: a.queue for a in admit(waiting, running, quotas, slots)}


def test_a_team_at_its_job_limit_waits_while_another_team_starts() -> None:
    running = [claim("a1", seq=1), claim("a2", seq=2)]
    waiting = [claim("a3", seq=3), claim("b1", "team-b", seq=4), claim("a4", seq=5)]
    got = answers(waiting, running, TWO_JOBS_EACH)
    assert got["b1"] is None
    assert got["a3"] == QueueStatus(name="team/team-a", position=1, reason="TeamJobLimit", message="team-a runs 2 of its 2 concurrent jobs")
    assert got["a4"] is not None and (got["a4"].position, got["a4"].reason) == (2, "TeamJobLimit")


def test_high_priority_goes_before_normal_and_low_whatever_the_submission_order() -> None:
    quotas = TeamQuotas(default=TeamLimits(max_jobs=1))
    waiting = [claim("low", priority="low", seq=1), claim("normal", seq=2), claim("high", priority="high", seq=3)]
    got = answers(waiting, [], quotas)
    assert got["high"] is None
    assert [(got[j].position, got[j].reason) for j in ("normal", "low")] == [(1, "TeamJobLimit"), (2, "TeamJobLimit")]  # type: ignore[union-attr]


def test_within_one_priority_the_earlier_submission_goes_first() -> None:
    got = answers([claim("later", seq=9), claim("earlier", seq=2)], [], TeamQuotas(default=TeamLimits(max_jobs=1)))
    assert got["earlier"] is None and got["later"] is not None and got["later"].position == 1


def test_the_chip_limit_holds_back_a_tpu_job_but_not_a_cpu_job_of_the_same_team() -> None:
    quotas = TeamQuotas(teams={"team-a": TeamLimits(max_chips=8)})
    running = [claim("big", chips=4, seq=1)]
    waiting = [claim("tpu", chips=8, seq=2), claim("cpu", chips=0, seq=3), claim("small", chips=4, seq=4)]
    got = answers(waiting, running, quotas)
    assert got["cpu"] is None and got["small"] is None  # 4 + 4 fits; a job that fits is not held behind one that does not
    assert got["tpu"] == QueueStatus(
        name="team/team-a",
        position=1,
        reason="TeamChipLimit",
        message="team-a holds 8 of its 8 TPU chips and this job needs 8",
    )


def test_the_machines_slots_are_shared_in_admission_order_across_teams() -> None:
    waiting = [claim("b1", "team-b", seq=1), claim("a1", seq=2, priority="high"), claim("a2", seq=3)]
    got = answers(waiting, [claim("c1", "team-c")], TeamQuotas(), slots=2)
    assert got["a1"] is None
    assert got["b1"] == QueueStatus(
        name="team/team-b", position=1, reason="HostSlots", message="this machine runs 2 of its 2 concurrent jobs"
    )
    assert got["a2"] is not None and (got["a2"].position, got["a2"].reason) == (1, "HostSlots")


def test_a_teams_own_limit_is_the_reason_given_before_the_machines() -> None:
    # The machine is full too, but a free slot would not start it: the team's limit is what it waits for.
    got = answers([claim("a2", seq=2)], [claim("a1", seq=1)], TeamQuotas(default=TeamLimits(max_jobs=1)), slots=1)
    assert got["a2"] is not None and got["a2"].reason == "TeamJobLimit"


def test_tpu_jobs_take_the_machines_chips_one_at_a_time_and_a_cpu_job_starts_beside() -> None:
    """The lent v5e machine: one chip, and libtpu lets one process hold it; a second TPU trainer would fail after launch."""
    v5e_1 = chips_of("v5e-1")
    first, second, cpu = claim("tpu-1", chips=v5e_1, seq=1), claim("tpu-2", chips=v5e_1, seq=2), claim("cpu", seq=3)
    got = {a.job_id: a.queue for a in admit([first, second, cpu], [], TeamQuotas(), 8, host_chips=1)}
    assert got["tpu-1"] is None and got["cpu"] is None
    assert got["tpu-2"] == QueueStatus(
        name="team/team-a", position=1, reason="HostChips", message="1 of this machine's 1 TPU chip(s) held by tpu-1; this job needs 1"
    )
    # The first one ends; the cpu job still runs and holds no chip: the second starts.
    assert admit([second], [cpu], TeamQuotas(), 8, host_chips=1) == [Admission("tpu-2", None)]


def test_a_job_waiting_for_the_machines_chips_is_not_told_another_teams_job_ids() -> None:
    running = [claim("rl-theirs00001", "team-b", chips=4), claim("rl-mine0000001", chips=4)]
    got = {a.job_id: a.queue for a in admit([claim("tpu", chips=4)], running, TeamQuotas(), 8, host_chips=8)}
    assert got["tpu"] is not None
    assert got["tpu"].message == "8 of this machine's 8 TPU chip(s) held by rl-mine0000001, 1 job(s) of other teams; this job needs 4"


def test_the_machines_chips_are_the_reason_before_its_slots_and_after_the_teams_limits() -> None:
    # A free slot would not start it, so the chips are what it waits for; its team's limit would hold it anyway.
    got = answers([claim("tpu", chips=1, seq=2)], [claim("held", chips=1, seq=1)], TeamQuotas(), slots=1)
    assert got["tpu"] is not None and got["tpu"].reason == "HostSlots"  # no host chips given: not counted
    chips = {a.job_id: a.queue for a in admit([claim("tpu", chips=1, seq=2)], [claim("held", chips=1, seq=1)], TeamQuotas(), 1, 1)}
    assert chips["tpu"] is not None and chips["tpu"].reason == "HostChips"
    team = TeamQuotas(default=TeamLimits(max_chips=1))
    by_team = {a.job_id: a.queue for a in admit([claim("tpu", chips=1, seq=2)], [claim("held", chips=1, seq=1)], team, 1, 1)}
    assert by_team["tpu"] is not None and by_team["tpu"].reason == "TeamChipLimit"


def test_team_overrides_replace_the_default_for_that_team_only() -> None:
    quotas = TeamQuotas(default=TeamLimits(max_jobs=1), teams={"team-b": TeamLimits(max_jobs=3)})
    got = answers([claim(f"b{i}", "team-b", seq=i) for i in range(4)] + [claim("a1", seq=9), claim("a2", seq=10)], [], quotas)
    assert [got[f"b{i}"] is None for i in range(4)] == [True, True, True, False]
    assert got["a1"] is None and got["a2"] is not None


def test_a_job_larger_than_its_teams_chip_limit_can_never_start() -> None:
    quotas = TeamQuotas(default=TeamLimits(max_chips=4))
    assert chips_of("v6e-8") == 8 and chips_of("v5p-8") == 4 and chips_of("cpu") == 0
    assert never_fits("team-a", chips_of("v6e-8"), quotas) == (
        "the job needs 8 TPU chips and team team-a may hold at most 4 at once on this machine"
    )
    assert never_fits("team-a", chips_of("v6e-4"), quotas) is None
    assert never_fits("team-a", 8, TeamQuotas()) is None


def test_team_quota_settings_combine_defaults_and_overrides() -> None:
    settings = Settings(
        team_max_jobs=2,
        team_max_chips=8,
        team_quotas='{"team-a": {"max_jobs": 4}, "team-b": {"max_chips": 0}}',  # type: ignore[arg-type]  # as from the environment
    )
    quotas = team_quotas(settings)
    assert quotas.of("team-a") == TeamLimits(max_jobs=4, max_chips=8)
    assert quotas.of("team-b") == TeamLimits(max_jobs=2, max_chips=0)
    assert quotas.of("anyone") == TeamLimits(max_jobs=2, max_chips=8)
    assert team_quotas(Settings()) == TeamQuotas()  # unset: only the machine's limit


@pytest.mark.parametrize(
    ("value", "where", "says"),
    [
        ('{"team-a": {"max_jobs": 0}}', ("team_quotas", "team-a", "max_jobs"), "greater than or equal to 1"),
        ('{"team-a": {"max_chips": -1}}', ("team_quotas", "team-a", "max_chips"), "greater than or equal to 0"),
        ('{"team-a": {"max_job": 2}}', ("team_quotas", "team-a", "max_job"), "Extra inputs are not permitted"),
        ("team-a=2", ("team_quotas",), "is not JSON"),
        ("[2]", ("team_quotas",), "must be a JSON object of team -> limits"),
        ('{" ": {"max_jobs": 1}}', ("team_quotas",), "team names must not be empty"),
    ],
)
def test_bad_team_quotas_are_refused_at_start_up_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, value: str, where: tuple[str, ...], says: str
) -> None:
    monkeypatch.setenv("RLJOB_TEAM_QUOTAS", value)
    with pytest.raises(ValidationError) as raised:
        Settings()
    [error] = raised.value.errors()
    assert error["loc"] == where and says in error["msg"]


def test_rljob_serve_with_bad_team_quotas_says_which_setting_and_why(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("RLJOB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RLJOB_TEAM_QUOTAS", '{"team-a": {"max_jobs": "two"}}')
    result = CliRunner().invoke(cli, ["serve"])
    assert result.exit_code == CliExit.BAD_INPUT, result.output
    assert "invalid settings" in result.output and "RLJOB_TEAM_QUOTAS" in result.output
    assert "team-a.max_jobs" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "state").exists()  # nothing started
