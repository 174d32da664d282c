"""Team budgets, the pure part, as tables: the month a job's billed time counts in (a job spanning the month's start
counts the part it ran in each), what is left, the observation policy's rows for a held job, and the setting's
validation. Which budget refuses a submission: test_budget_admission.py."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from service.config import Settings
from service.domain.cost.budgets import billed_seconds_since, exhausted, month_spend, month_start, team_status
from service.domain.observation_policy import Decision, decide
from service.domain.records.budget_models import BudgetAmounts, TeamBudget
from service.domain.records.models import JobEvent, JobRecord, Placement
from service.domain.records.phases import JobPhase, can_transition
from service.domain.records.ports import ObservedState
from tests.service.service_helpers import record_spec

P, S, D = JobPhase, ObservedState, Decision
DEC_31 = datetime(2029, 12, 31, 23, 0, tzinfo=UTC)
JAN_1 = datetime(2030, 1, 1, tzinfo=UTC)


def _tpu_job(
    created: datetime, phase: JobPhase, entered: datetime, *, seconds: dict[str, float], finished: datetime | None = None
) -> JobRecord:
    spec = record_spec(hardware={"accelerator": "v6e-8", "rollout_engine": "jax"})
    return JobRecord(
        id="rl-budget00001",
        team="team-a",
        name="j",
        spec=spec,
        spec_hash="h",
        phase=phase,
        created_at=created,
        updated_at=entered,
        phase_seconds=dict(seconds),
        phase_entered_at=entered,
        finished_at=finished,
        placement=Placement(capacity="on-demand", billed_s={}),
    )


def _phase_event(seq: int, phase: str, time: datetime) -> JobEvent:
    return JobEvent(seq=seq, job_id="rl-budget00001", team="team-a", kind="phase", time=time, data={"phase": phase})


def test_the_month_is_the_calendar_month_in_utc() -> None:
    assert month_start(datetime(2030, 3, 31, 23, 59, tzinfo=UTC)) == datetime(2030, 3, 1, tzinfo=UTC)
    # 00:30 on April 1st in UTC+2 is still March in UTC
    assert month_start(datetime(2030, 4, 1, 0, 30, tzinfo=UTC) - timedelta(hours=2)) == datetime(2030, 3, 1, tzinfo=UTC)


# A job submitted at 23:00 on Dec 31st: queued 10 min, running 20 min, then (a) still running, (b) queued (held) from
# 23:30 to 00:30, running again till 01:00 and ended. Seconds it was billed in January, as now = 01:00.
@pytest.mark.parametrize(
    ("events", "phase", "seconds", "finished", "billed_in_january"),
    [
        # still running since 23:10: 23:10-24:00 in December, 00:00-01:00 in January
        ([(1, "QUEUED", 0), (2, "RUNNING", 600)], P.RUNNING, {"QUEUED": 600}, None, 3600.0),
        # ran 23:10-23:30, held 23:30-00:30, ran 00:30-01:00, ended
        (
            [
                (1, "QUEUED", 0),
                (2, "RUNNING", 600),
                (3, "QUEUED", 1800),
                (4, "LAUNCHING", 5400),
                (5, "RUNNING", 5400),
                (6, "SUCCEEDED", 7200),
            ],
            P.SUCCEEDED,
            {"QUEUED": 4200, "RUNNING": 3000},
            DEC_31 + timedelta(seconds=7200),
            1800.0,
        ),
        # ran and ended in December: nothing in January
        (
            [(1, "QUEUED", 0), (2, "RUNNING", 600), (3, "SUCCEEDED", 1800)],
            P.SUCCEEDED,
            {"QUEUED": 600, "RUNNING": 1200},
            DEC_31 + timedelta(seconds=1800),
            0.0,
        ),
    ],
    ids=["running-across", "held-across", "ended-before"],
)
def test_a_job_spanning_the_months_start_counts_the_part_it_ran_in_each(
    events: list[tuple[int, str, int]], phase: JobPhase, seconds: dict[str, float], finished: datetime | None, billed_in_january: float
) -> None:
    last_entered = DEC_31 + timedelta(seconds=events[-1][2])
    record = _tpu_job(DEC_31, phase, last_entered, seconds=seconds, finished=finished)
    log = [_phase_event(seq, name, DEC_31 + timedelta(seconds=at)) for seq, name, at in events]
    now = JAN_1 + timedelta(hours=1)
    assert billed_seconds_since(record, log, JAN_1, now) == pytest.approx(billed_in_january)
    spent = month_spend([record], {record.id: log}, now, {"v6e": {"on-demand": 2.0}})
    assert spent.chip_hours == pytest.approx(8 * billed_in_january / 3600)
    assert spent.usd == pytest.approx(2.0 * 8 * billed_in_january / 3600)


def test_a_job_submitted_in_the_month_counts_whole_and_a_cpu_job_counts_nothing() -> None:
    record = _tpu_job(JAN_1, P.RUNNING, JAN_1 + timedelta(minutes=5), seconds={"QUEUED": 300})
    now = JAN_1 + timedelta(minutes=35)
    assert billed_seconds_since(record, [], JAN_1, now) == 1800.0  # no events needed
    cpu = JobRecord(**{**record.__dict__, "spec": record_spec()})
    assert month_spend([cpu], {}, now, {}).chip_hours == 0.0


def test_a_budget_is_exhausted_once_the_spend_reaches_it() -> None:
    none_left = team_status("team-a", TeamBudget(chip_hours=100, usd=300), BudgetAmounts(chip_hours=100, usd=0), JAN_1)
    assert none_left.exhausted == ["chip_hours"] and none_left.left_chip_hours == 0.0
    assert exhausted(TeamBudget(usd=5), BudgetAmounts(chip_hours=1e6, usd=4.99)) == []


# A held job (its budget is spent and the service stopped its workload): the rows that differ from the table in
# test_observation_policy.py. Its workload's end (GONE, or FAILED: exit 75 after the checkpoint, or a kill) is the stop.
HELD_ROWS = {
    (P.QUEUED, S.GONE): D.HOLD,
    (P.QUEUED, S.FAILED): D.HOLD,
    (P.LAUNCHING, S.GONE): D.HOLD,
    (P.LAUNCHING, S.FAILED): D.HOLD,
    (P.RUNNING, S.GONE): D.HOLD,  # not RESUME: no resume spent
    (P.RUNNING, S.FAILED): D.HOLD,  # not FAIL
}


@pytest.mark.parametrize(("phase", "state"), list(itertools.product(JobPhase, ObservedState)))
def test_a_held_job_is_decided_by_its_own_rows_and_the_table_elsewhere(phase: JobPhase, state: ObservedState) -> None:
    for resumes_left in (True, False):
        got = decide(phase, state, resumes_left=resumes_left, held=True)
        assert got is HELD_ROWS.get((phase, state), decide(phase, state, resumes_left=resumes_left)), (phase, state)
        assert got.target is None or got.target is phase or can_transition(phase, got.target)
        assert not (got is D.HOLD and got.relaunches)
    # A stale GONE (about the workload the stop replaced) and a workload still being deleted are not the stop's end.
    assert decide(phase, S.GONE, about_replaced_workload=True, held=True) in (D.STALE, D.IGNORE)
    if phase in (P.LAUNCHING, P.RUNNING):
        assert decide(phase, S.GONE, deleting=True, held=True) is D.WAIT
        assert decide(phase, S.RESTARTING, requeue_disrupted=True, held=True) is D.NOTE  # never requeued while held


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"Team-A": {"usd": 1}}', "not a team name"),
        ('{"team-a": {"usd": -1}}', "greater than or equal to 0"),
        ('{"team-a": {"chip_hours": NaN}}', "finite"),
        ('{"team-a": {}}', "names chip_hours, usd or both"),
        ('{"team-a": {"usd": 1, "eur": 2}}', "Extra inputs"),
        ("team-a=5", "is not JSON"),
    ],
)
def test_the_budget_setting_refuses_what_is_not_a_budget(raw: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        Settings(team_budgets=raw)  # type: ignore[arg-type]
    assert Settings(team_budgets='{"team-a": {"chip_hours": 500, "usd": 1000}}').team_budgets == {  # type: ignore[arg-type]
        "team-a": TeamBudget(chip_hours=500, usd=1000)
    }
