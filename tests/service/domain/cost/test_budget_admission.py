"""Admission against a team's budget, the pure part, as tables (service/domain/cost/budget_admission.py): what each active
job still commits (its estimate's upper bound less what it billed), and which budget refuses one more job when the
committed amount plus that job's upper bound would pass it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from service.domain.cost.budget_admission import Commitment, admission_refusal, commitment, still_to_bill
from service.domain.cost.budgets import team_status
from service.domain.cost.usage import PriceTable
from service.domain.records.budget_models import BudgetAmounts, JobHold, TeamBudget
from service.domain.records.estimate_models import EstimateRange, JobEstimate
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import T0, record_spec

P = JobPhase
NOW = T0 + timedelta(days=3)
PRICES: PriceTable = {"v6e": {"on-demand": 2.0}}  # dollars = 2 x chip-hours
TPU = {"accelerator": "v6e-8", "rollout_engine": "jax"}


def _estimate(expected: float, low: float, high: float, *, priced: bool = True) -> JobEstimate:
    r = EstimateRange(expected=60.0, low=60.0, high=60.0)
    chip_hours = EstimateRange(expected=expected, low=low, high=high)
    usd = EstimateRange(expected=2 * expected, low=2 * low, high=2 * high) if priced else None
    return JobEstimate(made_at=T0, basis="formula", basis_detail="test", run_s=r, wall_s=r, chip_hours=chip_hours, cost_usd=usd)


def _job(
    phase: JobPhase, running_s: float, estimate: JobEstimate | None, *, hardware: dict[str, str] = TPU, held: bool = False
) -> JobRecord:
    """A job that has run `running_s` seconds (billed) and is now in `phase`, entered just now."""
    return JobRecord(
        id="rl-admission001",
        team="team-a",
        name="j",
        spec=record_spec(hardware=hardware),
        spec_hash="h",
        phase=phase,
        created_at=T0,
        updated_at=NOW,
        phase_seconds={"RUNNING": running_s} if running_s else {},
        phase_entered_at=NOW,
        estimate=estimate,
        hold=JobHold(reason="budget", since=NOW, message="held") if held else None,
    )


# (phase, billed seconds on 8 chips, the estimate's (expected, low, high) chip-hours or None, what it still commits)
@pytest.mark.parametrize(
    ("phase", "running_s", "estimate", "commits", "held"),
    [
        (P.QUEUED, 0, (1.0, 0.5, 3.0), 3.0, False),  # the upper bound, not the expected 1.0
        (P.QUEUED, 1800, (1.0, 0.5, 3.0), 0.0, True),  # held after billing 4 of its 3: nothing more
        (P.QUEUED, 900, (1.0, 0.5, 3.0), 1.0, True),  # held after billing 2: up to 1 more when it resumes
        (P.LAUNCHING, 0, (2.0, 1.0, 4.0), 4.0, False),
        (P.RUNNING, 1800, (6.0, 3.0, 10.0), 6.0, False),  # billed 4 of its 10
        (P.RUNNING, 1800, (1.0, 0.5, 3.0), 0.0, False),  # ran past its upper bound: its spend counts, never less
        (P.CANCELLING, 0, (1.0, 0.5, 3.0), None, False),  # stopping: only what it bills
        (P.SUCCEEDED, 0, (1.0, 0.5, 3.0), None, False),
        (P.QUEUED, 0, None, None, False),  # stored without an estimate: only what it bills
    ],
)
def test_an_active_job_commits_its_upper_bound_less_what_it_billed(
    phase: JobPhase, running_s: float, estimate: tuple[float, float, float] | None, commits: float | None, held: bool
) -> None:
    record = _job(phase, running_s, _estimate(*estimate) if estimate else None, held=held)
    left = still_to_bill(record, NOW, PRICES)
    if commits is None:
        assert left is None
        return
    assert left is not None
    assert left.chip_hours == pytest.approx(commits) and left.usd == pytest.approx(2 * commits)


def test_a_cpu_job_commits_nothing_and_an_unpriced_estimate_commits_no_dollars() -> None:
    assert (
        still_to_bill(_job(P.QUEUED, 0, _estimate(1, 1, 1), hardware={"accelerator": "cpu", "rollout_engine": "jax"}), NOW, PRICES) is None
    )
    unpriced = still_to_bill(_job(P.QUEUED, 0, _estimate(1, 1, 2, priced=False)), NOW, PRICES)
    assert unpriced == BudgetAmounts(chip_hours=2.0, usd=0.0)
    jobs = [_job(P.QUEUED, 0, _estimate(1, 1, 2)), _job(P.RUNNING, 900, _estimate(1, 1, 3)), _job(P.CANCELLING, 0, _estimate(1, 1, 9))]
    held = commitment(BudgetAmounts(chip_hours=5.0, usd=10.0), jobs, NOW, PRICES)
    assert (held.jobs, held.pending, held.committed("chip_hours"), held.committed("usd")) == (
        2,
        BudgetAmounts(chip_hours=3.0, usd=6.0),
        8.0,
        16.0,
    )


BUDGET = TeamBudget(chip_hours=10, usd=100)


# (spent h, spent $, pending h, pending $, the new job's (expected, low, high) chip-hours or None, its dollars' high, chips, refused by)
@pytest.mark.parametrize(
    ("spent_h", "spent_usd", "pending_h", "pending_usd", "estimate", "usd_high", "chips", "refused_by"),
    [
        (4, 0, 3, 0, (1, 0.5, 3), 0, 8, None),  # 4 + 3 committed + 3 = 10: exactly the budget fits
        (4, 0, 3, 0, (1, 0.5, 3.5), 0, 8, "chip_hours"),  # expected 1 would fit; its upper bound does not
        (0, 0, 7.5, 0, (1, 0.5, 3), 0, 8, "chip_hours"),  # nothing spent yet: the queued jobs' bounds alone
        (0, 50, 0, 40, (1, 0.5, 1), 10.01, 8, "usd"),
        (0, 50, 0, 40, (1, 0.5, 1), None, 8, "usd"),  # no price: the dollar budget cannot bound it, so it refuses
        (10, 100, 5, 50, (1, 1, 1), 1, 0, None),  # a cpu job costs nothing, even over the budget
        (4, 0, 5.9, 0, None, None, 8, None),  # not estimated: refused only once nothing is left
        (4, 0, 6, 0, None, None, 8, "chip_hours"),
    ],
)
def test_a_job_is_refused_when_its_upper_bound_would_take_the_committed_amount_past_a_budget(
    spent_h: float,
    spent_usd: float,
    pending_h: float,
    pending_usd: float,
    estimate: tuple[float, float, float] | None,
    usd_high: float | None,
    chips: int,
    refused_by: str | None,
) -> None:
    status = team_status("team-a", BUDGET, BudgetAmounts(chip_hours=spent_h, usd=spent_usd), NOW)
    held = Commitment(spent=status.spent, pending=BudgetAmounts(chip_hours=pending_h, usd=pending_usd), jobs=2)
    job = None
    if estimate is not None:
        job = _estimate(*estimate).model_copy(
            update={"cost_usd": None if usd_high is None else EstimateRange(expected=usd_high / 2, low=usd_high / 4, high=usd_high)}
        )
    refused = admission_refusal(status, held, job, chips)
    assert (refused[0] if refused else None) == refused_by
    if refused and estimate is None:
        assert "this job was not estimated, and nothing is left" in refused[1]
    if refused and estimate is not None and usd_high is None:
        assert "rljob has no price for this job's accelerator and capacity" in refused[1]


def test_the_refusal_names_the_budget_the_spend_what_is_committed_and_the_jobs_estimate() -> None:
    status = team_status("team-a", BUDGET, BudgetAmounts(chip_hours=4, usd=8), NOW)
    held = Commitment(spent=status.spent, pending=BudgetAmounts(chip_hours=3, usd=6), jobs=2)
    refused = admission_refusal(status, held, _estimate(1.5, 0.75, 3.5), 8)
    assert refused == (
        "chip_hours",
        "team team-a's chip-hour budget for 2030-01 (UTC) is 10.00 chip-hours, and 7.00 chip-hours of it is committed: "
        "4.00 chip-hours spent and up to 3.00 chip-hours more for its 2 queued or running jobs (each one's estimate's "
        "upper bound less what it has billed); this job's estimate is 1.50 chip-hours (0.75 chip-hours to 3.50 "
        "chip-hours): up to 3.50 chip-hours, more than the 3.00 chip-hours left. Wait for the team's jobs to end or for "
        "the next month, cancel a queued job, ask an admin to raise the budget (RLJOB_TEAM_BUDGETS), or an admin may "
        "submit it anyway with override_budget=true (rljob submit --override-budget)",
    )
