"""/v1/usage: a team's chip-hours and cost (service/domain/cost/usage.py computes them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import CallerDep, ClockDep, JobServiceDep, SettingsDep
from service.api.errors import error_responses
from service.domain.cost.storage_usage import storage_histories
from service.domain.cost.usage import summarize_usage
from service.domain.job_service import JobService
from service.domain.records.budget_models import TeamBudgetStatus
from service.domain.records.errors import InvalidRequest
from service.domain.records.models import Caller, JobFilters, JobRecord
from service.domain.records.usage_models import UsagePublic

router = APIRouter(prefix="/v1/usage", tags=["usage"])
DEFAULT_WINDOW = timedelta(days=30)
MAX_REPORT_JOBS = 2000  # one report's rows (about 3 s of work on a loaded laptop); beyond it says `truncated`
PAGE_SIZE = 200


def _iso_time(text: str) -> datetime:
    """An ISO 8601 date or time, UTC unless it names a zone. Only that: pydantic would also take a
    number as seconds since 1970 (`since=0.5`), which no one means."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(
            ("query", "since"), f"since={text!r} is not an ISO 8601 datetime or date, e.g. 2026-11-01 or 2026-11-01T12:00:00+01:00"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def jobs_submitted_since(jobs: JobService, caller: Caller, team: str | None, since: datetime) -> tuple[list[JobRecord], bool]:
    """The jobs `caller` may see, of `team` (None: every team, for admins), submitted at or after
    `since`, newest first; and whether more than MAX_REPORT_JOBS matched."""
    found: list[JobRecord] = []
    before: int | None = None
    while True:
        page, more = jobs.list_jobs(caller, JobFilters(team=team), before_pk=before, limit=PAGE_SIZE)
        for _, record in page:
            if record.created_at < since:  # newest first: every later one is older still
                return found, False
            if len(found) == MAX_REPORT_JOBS:
                return found, True
            found.append(record)
        if not more or not page:
            return found, False
        before = page[-1][0]


@router.get(
    "",
    response_model=UsagePublic,
    responses=error_responses(
        401,
        422,
        503,
        reasons={
            422: "`since` is not an ISO 8601 date or time, or is in the future; or `team` names another team "
            "and the token is not an admin's",
        },
    ),
)
def get_usage(
    caller: CallerDep,
    jobs: JobServiceDep,
    clock: ClockDep,
    settings: SettingsDep,
    team: Annotated[str | None, Query(max_length=63, description="admins: one team (default every team); others: only their own")] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=64,
            description="ISO 8601 date or time (UTC unless it names a zone): jobs submitted since then; default 30 days ago",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
) -> UsagePublic:
    """Chip-hours by phase and cost of the jobs submitted since `since`: the total, totals by team,
    accelerator and capacity, and one row per job. A job's usage counts whole, in the window it was
    submitted in; a job still active counts up to now. Only running (and cancelling) time is charged.
    Storage: each job's measured run-directory size integrated over time, in GiB-months; the newest
    size counts up to now, for an ended job too (its files stay until someone deletes them). Budgets: each reported
    team's monthly budget, what its jobs billed this calendar month (UTC) and what is left."""
    now = clock()
    if team is not None and not caller.admin and team != caller.team:
        raise InvalidRequest(("query", "team"), f"only admins read another team's usage; your token is team {caller.team}'s: omit team")
    scope = team if caller.admin else caller.team
    start = now - DEFAULT_WINDOW if since is None else _iso_time(since)
    if start > now:
        raise InvalidRequest(("query", "since"), f"since is in the future (now is {now.isoformat()}): give an earlier time")
    records, truncated = jobs_submitted_since(jobs, caller, scope, start)
    total, groups, rows = summarize_usage(
        records,
        now,
        settings.usage_prices_usd_per_chip_hour,
        storage=storage_histories(jobs.store, records),
        since=start,
        storage_price=settings.usage_storage_price_usd_per_gib_month,
    )
    return UsagePublic(
        team=scope,
        since=start,
        as_of=now,
        storage_price_usd_per_gib_month=settings.usage_storage_price_usd_per_gib_month,
        total=total,
        groups=groups,
        jobs=rows,
        truncated=truncated,
        budgets=team_budgets(jobs, scope, now),
    )


def team_budgets(jobs: JobService, team: str | None, now: datetime) -> list[TeamBudgetStatus]:
    """The budget of `team` (None: of every team that has one), spent this month and left."""
    teams = sorted(jobs.budgets.budgets) if team is None else [team]
    found = (jobs.budgets.status(name, now) for name in teams)
    return [status for status in found if status is not None]
