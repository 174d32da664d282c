"""Chip-hours and cost from a job record (service/domain/cost/usage.py, pure), the price table setting, and the
usage counters' bookkeeping against a real store."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from pydantic import ValidationError

from service.config import Settings
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, chips_of, job_usage, summarize_usage
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.run_report import StageTimes
from tests.service.service_helpers import T0, record_spec
from trainer.contract.accelerators.tpu import tpu_slice

PRICES = DEFAULT_PRICES_USD_PER_CHIP_HOUR


def _record(
    job_id: str = "rl-000000000001",
    *,
    team: str = "team-a",
    accelerator: str = "v6e-8",
    capacity: str = "on-demand",
    phase: JobPhase = JobPhase.RUNNING,
    seconds: dict[str, float] | None = None,
    entered_s: float = 0.0,
    finished_s: float | None = None,
) -> JobRecord:
    tpu = tpu_slice(accelerator)
    hardware: dict[str, object] = {
        "accelerator": accelerator,
        "capacity": capacity,
        "chips_per_vm": tpu.chips_per_vm if tpu else 8,
        "rollout_engine": "vllm" if tpu else "jax",
    }
    return JobRecord(
        id=job_id,
        team=team,
        name="usage",
        spec=record_spec(hardware=hardware),
        spec_hash="x",
        phase=phase,
        created_at=T0,
        updated_at=T0,
        phase_seconds=dict(seconds or {}),
        phase_entered_at=T0 + timedelta(seconds=entered_s),
        finished_at=T0 + timedelta(seconds=finished_s) if finished_s is not None else None,
    )


def test_chips_come_from_the_slice_table_and_cpu_has_none() -> None:
    assert (chips_of("v6e-8"), chips_of("v6e-16"), chips_of("v5p-8"), chips_of("cpu")) == (8, 16, 4, 0)


def test_a_running_job_counts_its_current_phase_up_to_now() -> None:
    record = _record(seconds={"QUEUED": 600.0, "LAUNCHING": 120.0}, entered_s=720.0)
    usage = job_usage(record, T0 + timedelta(seconds=720 + 3600), PRICES)
    assert usage.chips == 8 and usage.family == "v6e"
    assert usage.phases["QUEUED"].seconds == 600 and usage.phases["QUEUED"].chip_hours == pytest.approx(8 * 600 / 3600)
    assert usage.phases["RUNNING"].seconds == 3600 and usage.phases["RUNNING"].chip_hours == 8.0
    # Only running time is charged: 8 chip-hours at the v6e on-demand price, not the queued 1.33.
    assert usage.billed_chip_hours == 8.0
    assert usage.cost_usd == pytest.approx(8.0 * PRICES["v6e"]["on-demand"])
    later = job_usage(record, T0 + timedelta(seconds=720 + 7200), PRICES)
    assert later.phases["RUNNING"].chip_hours == 16.0 and later.as_of == T0 + timedelta(seconds=720 + 7200)


def test_an_ended_job_counts_what_it_ran_and_no_more() -> None:
    # Cancelled: an hour running, then 60 s cancelling while the workload stopped; both are billed.
    record = _record(
        accelerator="v5p-8",
        capacity="spot",
        phase=JobPhase.CANCELLED,
        seconds={"LAUNCHING": 30.0, "RUNNING": 3600.0, "CANCELLING": 60.0},
        entered_s=3690.0,
        finished_s=3690.0,
    )
    for now_s in (3690, 3690 + 86400):  # a day later it has not grown
        usage = job_usage(record, T0 + timedelta(seconds=now_s), PRICES)
        assert usage.billed_chip_hours == pytest.approx(4 * 3660 / 3600)
        assert usage.cost_usd == pytest.approx(4 * 3660 / 3600 * PRICES["v5p"]["spot"])
        assert usage.phases["LAUNCHING"].seconds == 30 and usage.as_of == T0 + timedelta(seconds=3690)


def test_stages_break_the_running_time_down_and_one_under_way_counts_up_to_now() -> None:
    record = _record(entered_s=0.0)
    record.report.stage_times = {
        "convert": StageTimes(started_at=T0, finished_at=T0 + timedelta(seconds=900), duration_s=900.0),
        "train": StageTimes(started_at=T0 + timedelta(seconds=900)),
    }
    usage = job_usage(record, T0 + timedelta(seconds=900 + 1800), PRICES)
    assert usage.stages["convert"].chip_hours == 2.0  # 8 chips x 15 min
    assert usage.stages["train"].seconds == 1800 and usage.stages["train"].chip_hours == 4.0
    assert usage.stages["export"].seconds == 0


def test_chip_hours_split_by_goodput_part_add_up_to_the_phases_and_sum_by_team() -> None:
    from service.domain.progress import fold_events
    from trainer.contract import GoodputMeasured
    from trainer.contract.run.goodput import TRAIN_PARTS, TrainGoodput

    record = _record(seconds={"QUEUED": 900.0, "LAUNCHING": 300.0}, entered_s=1200.0)
    record.report.stage_times = {"convert": StageTimes(started_at=T0, duration_s=450.0)}
    train = TrainGoodput(elapsed_s=1800.0, parts=dict.fromkeys(TRAIN_PARTS, 0.0) | {"rollout": 1350.0, "update": 450.0})
    fold_events(record, [GoodputMeasured(seq=0, time=T0 + timedelta(seconds=4700), job_id=record.id, attempt=1, train=train)])
    now = T0 + timedelta(seconds=1200 + 3600)
    usage = job_usage(record, now, PRICES)
    hours = {name: amount.chip_hours for name, amount in usage.parts.items()}
    # 8 chips: 15 min queued = 2, 5 min start-up, 7.5 min convert = 1, 22.5 min rollout = 3, 7.5 min update = 1.
    assert hours["queued"] == 2.0 and hours["convert"] == 1.0 and hours["rollout"] == 3.0 and hours["update"] == 1.0
    assert hours["startup"] == pytest.approx(8 * 300 / 3600)
    assert sum(hours.values()) == pytest.approx(sum(amount.chip_hours for amount in usage.phases.values()))
    assert hours["other"] == pytest.approx(8 * (3600 - 450 - 1800) / 3600)

    other_team = _record("rl-000000000002", team="team-b", entered_s=0.0)
    total, groups, _ = summarize_usage([record, dataclasses.replace(record, id="rl-000000000003"), other_team], now, PRICES)
    team_a = next(g for g in groups if g.team == "team-a")
    assert team_a.chip_hours_by_part["rollout"] == 6.0 and team_a.chip_hours_by_part["queued"] == 4.0
    assert total.chip_hours_by_part["other"] == pytest.approx(2 * hours["other"] + 8 * 4800 / 3600)
    assert sum(total.chip_hours_by_part.values()) == pytest.approx(sum(total.chip_hours.values()))


def test_cpu_jobs_show_hours_but_no_chip_hours_and_cost_nothing() -> None:
    usage = job_usage(_record(accelerator="cpu", entered_s=0.0), T0 + timedelta(seconds=7200), PRICES)
    assert usage.chips == 0 and usage.phases["RUNNING"].seconds == 7200
    assert usage.phases["RUNNING"].chip_hours == 0 and usage.cost_usd == 0


def test_a_family_without_a_price_shows_no_cost_and_the_sum_says_what_is_unpriced() -> None:
    prices = {"v6e": {"on-demand": 2.0}}
    priced = _record("rl-000000000001", entered_s=0.0)
    unpriced = _record("rl-000000000002", capacity="spot", entered_s=0.0)
    now = T0 + timedelta(seconds=3600)
    assert job_usage(unpriced, now, prices).cost_usd is None
    total, _, _ = summarize_usage([priced, unpriced], now, prices)
    assert total.cost_usd == 16.0 and total.unpriced_chip_hours == 8.0 and total.billed_chip_hours == 16.0


def test_the_sums_add_the_jobs_up_by_team_accelerator_and_capacity() -> None:
    now = T0 + timedelta(seconds=3600)
    records = [
        _record("rl-000000000001", entered_s=0.0),
        _record("rl-000000000002", entered_s=1800.0),
        _record("rl-000000000003", accelerator="v5p-8", capacity="spot", entered_s=0.0),
        _record("rl-000000000004", team="team-b", phase=JobPhase.QUEUED, entered_s=0.0),
    ]
    total, groups, rows = summarize_usage(records, now, PRICES)
    assert [row.job_id for row in rows] == [r.id for r in records]
    assert total.jobs == 4 and total.billed_chip_hours == pytest.approx(8 + 4 + 4)
    assert total.chip_hours["QUEUED"] == 8.0  # shown, not billed
    assert total.billed_chip_hours == pytest.approx(sum(row.usage.billed_chip_hours for row in rows))
    assert total.cost_usd == pytest.approx(sum(row.usage.cost_usd or 0 for row in rows))
    by_key = {(g.team, g.accelerator, g.capacity): g for g in groups}
    assert set(by_key) == {("team-a", "v6e-8", "on-demand"), ("team-a", "v5p-8", "spot"), ("team-b", "v6e-8", "on-demand")}
    assert by_key[("team-a", "v6e-8", "on-demand")].jobs == 2
    assert by_key[("team-a", "v6e-8", "on-demand")].billed_chip_hours == 12.0
    assert sum(g.billed_chip_hours for g in groups) == pytest.approx(total.billed_chip_hours)


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"v7x": {"spot": 1.0}}, "unknown TPU family 'v7x'"),
        ({"v6e": {"spot": -1.0}}, "finite number >= 0"),
        ({"v6e": {"cheap": 1.0}}, "on-demand"),
    ],
)
def test_the_price_table_setting_refuses_what_it_cannot_price(table: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match="usage_prices_usd_per_chip_hour") as refused:
        Settings(usage_prices_usd_per_chip_hour=table)  # type: ignore[arg-type]
    assert problem in str(refused.value)


class _FlakyStore:
    """The real store, whose list_active fails when told to (a database outage during a scrape)."""

    def __init__(self, store: object) -> None:
        self._store, self.fail = store, False

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def list_active(self) -> list[JobRecord]:
        if self.fail:
            self.fail = False
            raise OSError("database unreachable")
        return self._store.list_active()  # type: ignore[attr-defined, no-any-return]


def test_a_failed_scrape_loses_no_job_that_ended_meanwhile(store: object) -> None:
    from service.api.usage_metrics import UsageCounters

    flaky = _FlakyStore(store)
    counters = UsageCounters(flaky, lambda: T0 + timedelta(hours=2), PRICES)  # type: ignore[arg-type]
    ended = _record(phase=JobPhase.SUCCEEDED, seconds={"RUNNING": 3600.0}, entered_s=3600.0, finished_s=3600.0)
    with store.transaction() as tx:  # type: ignore[attr-defined]
        tx.insert(ended)
        tx.append_event(ended, "phase", {"phase": "SUCCEEDED", "previous": "RUNNING"}, T0)

    def running_chip_seconds() -> float:
        chips = next(family for family in counters.collect() if family.name == "rljob_chip_seconds")
        return sum(s.value for s in chips.samples if s.labels["phase"] == "RUNNING")

    flaky.fail = True
    assert running_chip_seconds() == 0  # the outage: nothing counted, nothing lost
    assert running_chip_seconds() == 8 * 3600
    assert running_chip_seconds() == 8 * 3600  # and counted once
