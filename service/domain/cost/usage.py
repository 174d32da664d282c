"""Chip-hours and cost, computed from a job record: pure functions of the record, a time and a price table.

A job holds its slice's chips (trainer/contract/accelerators/tpu.py; a cpu job 0 chips) for the time it spends in
each phase: `phase_seconds` keeps the phases it has left, and the phase it is in counts up to `now`
(from `phase_entered_at`) until the job ends. Stage times (convert, train, export) come from the
trainer's events and break the running time down.

Only the time the workload holds its chips is charged: RUNNING, and CANCELLING (the workload runs
until it is seen to stop). QUEUED time (waiting for capacity) and LAUNCHING time (admitted, the pod
not yet running) are shown but not charged. Cost = billed chip-hours x the price of the slice's
family (v6e, v5e, v5p) and the kind of capacity it ran on: the one its backend admitted it into
(placement.py), each kind's share at its own price when a requeued job came back on another kind of its set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from service.domain.records.models import JobRecord
from service.domain.records.usage_models import JobStorageUsage, JobUsage, JobUsageRow, UsageAmount, UsageGroup, UsageSum
from trainer.contract.accelerators.tpu import CPU_ACCELERATOR, tpu_slice
from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS
from trainer.contract.run.goodput import GOODPUT_PARTS
from trainer.contract.spec.hardware import capacity_text

from .goodput import clock_parts
from .job_clock import USAGE_PHASES, JobClock, job_clock
from .placement import BILLED_PHASES, billed_by_capacity
from .storage_usage import StorageSample, job_storage_usage

# USD per chip-hour by family and capacity. The docs (docs/usage.md) say where these come
# from and when; RLJOB_USAGE_PRICES_USD_PER_CHIP_HOUR replaces the table.
CapacityType = Literal["on-demand", "spot", "flex-start", "reservation"]  # HardwareSpec.capacity's values
PriceTable = Mapping[str, Mapping[CapacityType, float]]
# The list prices of trainer/contract/accelerators/tpu_generations.py; a generation it prices not (tpu7x) has no row here.
DEFAULT_PRICES_USD_PER_CHIP_HOUR: dict[str, dict[CapacityType, float]] = {
    name: {capacity: price for capacity, price in g.list_prices_usd_per_chip_hour.items()}  # type: ignore[misc]
    for name, g in TPU_GENERATIONS.items()
    if g.list_prices_usd_per_chip_hour
}

_DIGITS = 6  # a millionth of a chip-hour (3.6 ms of one chip): below any clock's meaning here


def chips_of(accelerator: str) -> int:
    """The slice's chips; 0 for cpu (and for a name no longer in the table)."""
    tpu = tpu_slice(accelerator)
    return tpu.chips if tpu else 0


def family_of(accelerator: str) -> str:
    tpu = tpu_slice(accelerator)
    return tpu.generation if tpu else CPU_ACCELERATOR


def price_of(prices: PriceTable, family: str, capacity: str) -> float | None:
    """USD per chip-hour; cpu costs nothing; None when the table has no price for it."""
    if family == CPU_ACCELERATOR:
        return 0.0
    return next((price for name, price in prices.get(family, {}).items() if name == capacity), None)


def _amount(seconds: float, chips: int) -> UsageAmount:
    return UsageAmount(seconds=round(seconds, 3), chip_hours=round(chips * seconds / 3600, _DIGITS))


def job_capacity(record: JobRecord) -> str:
    """The kind of capacity a job's usage is shown under: the one it was last admitted into, else its spec's
    kind (or set, as `[spot, on-demand]`, before any admission was seen)."""
    return record.placement.capacity if record.placement else capacity_text(record.hardware.capacities)


def job_usage(record: JobRecord, now: datetime, prices: PriceTable) -> JobUsage:
    return usage_of(record, job_clock(record, now), prices)


def usage_of(record: JobRecord, clock: JobClock, prices: PriceTable) -> JobUsage:
    """job_usage from a clock already read."""
    accelerator, capacity = record.hardware.accelerator, job_capacity(record)
    chips, family = chips_of(accelerator), family_of(accelerator)
    by_phase = clock.phases
    billed_s = sum(by_phase[p.value] for p in BILLED_PHASES)
    billed_chip_hours = chips * billed_s / 3600
    price = price_of(prices, family, record.placement.capacity if record.placement else record.hardware.capacities[0])
    # Each kind's billed time at its own price: a job requeued from spot onto on-demand pays each for its share.
    by_kind = billed_by_capacity(record, billed_s)
    kind_prices = [price_of(prices, family, kind) for kind in by_kind]
    cost = None
    if all(p is not None for p in kind_prices):
        cost = sum(chips * s / 3600 * (p or 0.0) for s, p in zip(by_kind.values(), kind_prices, strict=True))
    return JobUsage(
        accelerator=accelerator,
        family=family,
        capacity=capacity,
        chips=chips,
        phases={name: _amount(s, chips) for name, s in by_phase.items()},
        stages={name: _amount(s, chips) for name, s in clock.stages.items()},
        parts={name: _amount(s, chips) for name, s in _clamped_parts(record, clock).items()},
        billed_chip_hours=round(billed_chip_hours, _DIGITS),
        price_usd_per_chip_hour=price,
        cost_usd=None if cost is None else round(cost, _DIGITS),
        as_of=clock.as_of,
    )


def freed_checkpoints(record: JobRecord) -> list[StorageSample]:
    """The checkpoints retention deleted from the job's run directory: when, and their bytes (checkpoint_expiry.py)."""
    expiry = record.checkpoint_expiry
    return [StorageSample(c.deleted_at, c.size_bytes) for c in expiry.deleted if c.deleted_at is not None] if expiry else []


def usage_parts(record: JobRecord, now: datetime) -> dict[str, float]:
    """Seconds by goodput part (goodput.py), `other` clamped at 0 as JobPublic.goodput shows it."""
    return _clamped_parts(record, job_clock(record, now))


def _clamped_parts(record: JobRecord, clock: JobClock) -> dict[str, float]:
    _, parts = clock_parts(record, clock)
    return {name: max(0.0, seconds) for name, seconds in parts.items()}


@dataclass
class _Tally:
    """A running sum, unrounded until it is shown."""

    jobs: int = 0
    billed: float = 0.0
    cost: float = 0.0
    unpriced: float = 0.0
    storage_gib_months: float = 0.0
    storage_cost: float = 0.0
    storage_saved: float = 0.0
    storage_cost_saved: float = 0.0

    def __post_init__(self) -> None:
        self.by_phase = {phase.value: 0.0 for phase in USAGE_PHASES}
        self.by_part = dict.fromkeys(GOODPUT_PARTS, 0.0)

    def add(self, usage: JobUsage, storage: JobStorageUsage) -> None:
        self.jobs += 1
        self.storage_gib_months += storage.gib_months
        self.storage_cost += storage.cost_usd
        self.storage_saved += storage.gib_months_saved
        self.storage_cost_saved += storage.cost_saved_usd
        for name, amount in usage.phases.items():
            self.by_phase[name] += amount.chip_hours
        for name, amount in usage.parts.items():
            self.by_part[name] += amount.chip_hours
        self.billed += usage.billed_chip_hours
        if usage.cost_usd is None:
            self.unpriced += usage.billed_chip_hours
        else:
            self.cost += usage.cost_usd

    def as_sum(self) -> UsageSum:
        return UsageSum(
            jobs=self.jobs,
            chip_hours={name: round(v, _DIGITS) for name, v in self.by_phase.items()},
            chip_hours_by_part={name: round(v, _DIGITS) for name, v in self.by_part.items()},
            billed_chip_hours=round(self.billed, _DIGITS),
            cost_usd=round(self.cost, _DIGITS),
            unpriced_chip_hours=round(self.unpriced, _DIGITS),
            storage_gib_months=round(self.storage_gib_months, _DIGITS),
            storage_cost_usd=round(self.storage_cost, _DIGITS),
            storage_gib_months_saved=round(self.storage_saved, _DIGITS),
            storage_cost_saved_usd=round(self.storage_cost_saved, _DIGITS),
        )


def summarize_usage(
    records: Iterable[JobRecord],
    now: datetime,
    prices: PriceTable,
    *,
    storage: Mapping[str, Sequence[StorageSample]] | None = None,
    since: datetime | None = None,
    storage_price: float = 0.0,
) -> tuple[UsageSum, list[UsageGroup], list[JobUsageRow]]:
    """The total, the totals by (team, accelerator, capacity), and one row per job (in the order given).
    `storage`: each job's run-directory measurements (storage_usage.py), integrated over [since, now]."""
    total = _Tally()
    groups: dict[tuple[str, str, str], _Tally] = {}
    rows = []
    for record in records:
        usage = job_usage(record, now, prices)
        stored = job_storage_usage(
            (storage or {}).get(record.id, ()), since or record.created_at, now, storage_price, freed=freed_checkpoints(record)
        )
        total.add(usage, stored)
        groups.setdefault((record.team, usage.accelerator, usage.capacity), _Tally()).add(usage, stored)
        rows.append(
            JobUsageRow(
                job_id=record.id,
                name=record.name,
                team=record.team,
                phase=record.phase,
                created_at=record.created_at,
                usage=usage,
                storage=stored,
            )
        )
    by_group = [
        UsageGroup(team=team, accelerator=accelerator, capacity=capacity, **tally.as_sum().model_dump())
        for (team, accelerator, capacity), tally in sorted(groups.items())
    ]
    return total.as_sum(), by_group, rows
