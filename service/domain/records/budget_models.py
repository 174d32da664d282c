"""Team budgets: a team's monthly chip-hour and/or dollar budget (settings), what it has spent this month and
what is left (GET /v1/usage), and why the service holds a job (its team's budget is spent). Owned by the budget
work of issue 37; computed by budgets.py, enforced by budget_reconciler.py."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

BudgetName = Literal["chip_hours", "usd"]


class JobHold(BaseModel):
    reason: Literal["budget"] = Field(description="budget: the team's monthly chip-hour or dollar budget is spent")
    since: datetime = Field(description="when the service decided to hold the job")
    message: str = Field(description="which budget, what was spent and what is left, and how the job comes back")


class TeamBudget(BaseModel):
    """One team's monthly budget (RLJOB_TEAM_BUDGETS): chip-hours, dollars, or both; each a ceiling of its own."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    chip_hours: float | None = Field(default=None, ge=0, description="billed TPU chip-hours a calendar month (UTC)")
    usd: float | None = Field(default=None, ge=0, description="dollars at the service's list prices a calendar month (UTC)")

    @model_validator(mode="after")
    def _names_an_amount(self) -> TeamBudget:
        if self.chip_hours is None and self.usd is None:
            raise ValueError('a budget names chip_hours, usd or both, e.g. {"chip_hours": 500, "usd": 1000}')
        return self


class BudgetAmounts(BaseModel):
    chip_hours: float = Field(description="billed TPU chip-hours")
    usd: float = Field(description="dollars at the service's list prices (billed chip-hours with no price count nothing)")


class TeamBudgetStatus(BaseModel):
    """A team's budget this month: what it is, what the team's jobs spent and what is left (GET /v1/usage)."""

    team: str
    month: str = Field(description="the calendar month (UTC) spent against, e.g. 2026-12")
    budget: TeamBudget
    spent: BudgetAmounts = Field(description="billed in this month by the team's jobs, the active ones up to as_of")
    left_chip_hours: float | None = Field(description="chip-hours left (0 once spent); null: no chip-hour budget")
    left_usd: float | None = Field(description="dollars left (0 once spent); null: no dollar budget")
    exhausted: list[BudgetName] = Field(description="the budgets spent: while any is, the team's TPU jobs are held")
    held_jobs: list[str] = Field(default_factory=list, description="the team's jobs held for the budget now")
