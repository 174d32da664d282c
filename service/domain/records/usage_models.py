"""What the API shows of chip-hours and cost: a job's `usage` (JobPublic) and a team's usage report
(GET /v1/usage). Computed by usage.py; kept apart from it so models.py can hold a JobUsage without
importing the code that reads job records.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from .budget_models import TeamBudgetStatus
from .phases import JobPhase


class UsageAmount(BaseModel):
    seconds: float = Field(description="wall-clock seconds")
    chip_hours: float = Field(description="the slice's chips x those seconds, in hours (0 for cpu jobs)")


class JobUsage(BaseModel):
    """A job's accelerator time: by phase (queued, launching, running, cancelling) and by stage."""

    accelerator: str = Field(description="hardware.accelerator, e.g. v6e-8 or cpu")
    family: str = Field(description="the price table's key: the TPU generation (v6e, v5e, v5p) or cpu")
    capacity: str = Field(
        description="the kind of capacity it was last admitted into (on-demand, spot, flex-start or reservation); "
        "before any admission, the spec's hardware.capacity (a set as [spot, on-demand])"
    )
    chips: int = Field(description="TPU chips of the slice; 0 for cpu jobs (their hours are still shown)")
    phases: dict[str, UsageAmount] = Field(description="by phase; the current one counts up to `as_of`")
    stages: dict[str, UsageAmount] = Field(description="by trainer stage (convert, train, export), within running")
    parts: dict[str, UsageAmount] = Field(
        default_factory=dict,
        description="by goodput part (JobPublic.goodput: queued, startup, convert, rollout, logprobs, update, "
        "weight_sync, checkpoint, eval, export, other): where the chips' time went; adds up to the phases",
    )
    billed_chip_hours: float = Field(description="running and cancelling chip-hours: the workload holds its chips")
    price_usd_per_chip_hour: float | None = Field(
        description="from the price table, for `capacity` (the kind it is on now); a job requeued onto another kind "
        "was charged each kind's share at that kind's price, so cost_usd is not billed_chip_hours x this; null: no price"
    )
    cost_usd: float | None = Field(
        description="billed chip-hours x price, each kind of capacity's share at its own price (a job requeued onto "
        "another kind of its set); queued and launching time is not charged"
    )
    as_of: datetime = Field(description="now for a job still active; when it ended for one that has")


class JobStorageUsage(BaseModel):
    """A job's run directory in a usage report: its size over time, from its `storage` events (storage_usage.py)."""

    total_bytes: int | None = Field(description="the newest measured size; null: never measured")
    measurements: int = Field(description="the `storage` events the GiB-months come from")
    gib_months: float = Field(
        description="the measured size integrated from the first measurement to the report's end (the last "
        "size is held until then, less what checkpoint retention deleted), in GiB x 30 days"
    )
    cost_usd: float = Field(description="gib_months x the storage price per GiB-month")
    freed_bytes: int = Field(default=0, description="bytes of the expired checkpoints checkpoint retention deleted by the report's end")
    gib_months_saved: float = Field(
        default=0.0,
        description="what those checkpoints would have added to gib_months had they been kept: their bytes from each "
        "deletion (or the report's start) to the report's end, in GiB x 30 days",
    )
    cost_saved_usd: float = Field(default=0.0, description="gib_months_saved x the storage price per GiB-month")


class UsageSum(BaseModel):
    """Usage added up over jobs."""

    jobs: int
    chip_hours: dict[str, float] = Field(description="by phase")
    chip_hours_by_part: dict[str, float] = Field(
        default_factory=dict, description="by goodput part (JobUsage.parts), adding up to the phases' chip-hours"
    )
    billed_chip_hours: float
    cost_usd: float = Field(description="the billed chip-hours that have a price, priced (storage apart)")
    unpriced_chip_hours: float = Field(description="billed chip-hours with no price in the table (not in cost_usd)")
    storage_gib_months: float = Field(default=0.0, description="the jobs' run directories, in GiB-months")
    storage_cost_usd: float = Field(default=0.0, description="storage_gib_months x the storage price")
    storage_gib_months_saved: float = Field(default=0.0, description="GiB-months checkpoint retention saved the jobs (JobStorageUsage)")
    storage_cost_saved_usd: float = Field(default=0.0, description="storage_gib_months_saved x the storage price")


class UsageGroup(UsageSum):
    team: str
    accelerator: str
    capacity: str


class JobUsageRow(BaseModel):
    job_id: str
    name: str
    team: str
    phase: JobPhase
    created_at: datetime
    usage: JobUsage
    storage: JobStorageUsage


class UsagePublic(BaseModel):
    """GET /v1/usage: chip-hours and cost of the jobs submitted since `since`."""

    team: str | None = Field(description="the team reported; null: every team (admins)")
    since: datetime = Field(description="jobs submitted at or after this are counted, each whole")
    as_of: datetime
    storage_price_usd_per_gib_month: float = Field(description="RLJOB_USAGE_STORAGE_PRICE_USD_PER_GIB_MONTH")
    total: UsageSum
    groups: list[UsageGroup] = Field(description="totals by team, accelerator and capacity")
    jobs: list[JobUsageRow] = Field(description="one row per job, newest first")
    truncated: bool = Field(description="more jobs matched than one report holds: narrow `since`")
    budgets: list[TeamBudgetStatus] = Field(
        default_factory=list,
        description="each reported team's monthly budget (RLJOB_TEAM_BUDGETS): spent this calendar month (UTC, whatever "
        "`since` is) and left; teams without a budget are not listed",
    )
