"""Storage GiB-months from constructed `storage` event histories (service/domain/cost/storage_usage.py, pure),
the storage price setting, how `rljob status` writes a run directory's size, and `rljob usage` against
a served app whose clock the test moves."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from service.cli.main import app as cli
from service.cli.storage_text import human_bytes, storage_text
from service.config import Settings
from service.domain.cost.storage_usage import GIB, StorageSample, gib_months, job_storage_usage, samples_of
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, summarize_usage
from service.domain.records.models import JobEvent, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.cli.test_cli_usage import _run, served  # noqa: F401  (the served app fixture and the CLI runner)
from tests.service.service_helpers import T0, TOKEN_A, ManualClock, record_spec, spec_body, wait_for_phase
from trainer.contract import RunStorage, StorageMeasured

DAY = timedelta(days=1)


def _at(days: float, gib: float) -> StorageSample:
    return StorageSample(T0 + days * DAY, int(gib * GIB))


def test_the_size_is_held_from_each_measurement_to_the_next_and_the_last_until_the_end() -> None:
    # 3 GiB for 10 days, then retention leaves 1.5 GiB for 20 days: 1 + 1 GiB-month (a month is 30 days).
    history = [_at(1, 3), _at(11, 1.5)]
    assert gib_months(history, T0, T0 + 31 * DAY) == 2.0
    usage = job_storage_usage(history, T0, T0 + 31 * DAY, price=0.02)
    assert (usage.gib_months, usage.cost_usd, usage.total_bytes, usage.measurements) == (2.0, 0.04, int(1.5 * GIB), 2)
    # Before the first measurement nothing is counted; the window clips both ends.
    assert gib_months(history, T0, T0 + DAY) == 0.0
    assert gib_months(history, T0 + 6 * DAY, T0 + 16 * DAY) == (3 * 5 + 1.5 * 5) / 30
    assert job_storage_usage([], T0, T0 + DAY, price=0.02).model_dump() == {
        "total_bytes": None,
        "measurements": 0,
        "gib_months": 0.0,
        "cost_usd": 0.0,
        "freed_bytes": 0,  # nothing deleted by checkpoint retention
        "gib_months_saved": 0.0,
        "cost_saved_usd": 0.0,
    }


def test_an_ended_jobs_last_size_counts_until_the_reports_end() -> None:
    # rljob deletes nothing: 6 GiB measured at export stays in the bucket after the job ended on day 1.
    ended = JobRecord(
        id="rl-000000000001",
        team="team-a",
        name="n",
        spec=record_spec(),
        spec_hash="x",
        phase=JobPhase.SUCCEEDED,
        created_at=T0,
        updated_at=T0,
        finished_at=T0 + DAY,
    )
    other = JobRecord(
        id="rl-000000000002",
        team="team-b",
        name="n",
        spec=record_spec(),
        spec_hash="x",
        phase=JobPhase.RUNNING,
        created_at=T0,
        updated_at=T0,
    )
    history = {ended.id: [_at(1, 6)], other.id: [_at(0, 2), _at(15, 0)]}
    for days, ended_months in ((16, 3.0), (31, 6.0)):
        total, groups, rows = summarize_usage(
            [ended, other], T0 + days * DAY, DEFAULT_PRICES_USD_PER_CHIP_HOUR, storage=history, since=T0, storage_price=0.025
        )
        assert rows[0].storage.gib_months == ended_months and rows[1].storage.gib_months == 1.0  # 2 GiB x 15 days
        assert {g.team: g.storage_gib_months for g in groups} == {"team-a": ended_months, "team-b": 1.0}
        assert total.storage_gib_months == ended_months + 1.0
        assert total.storage_cost_usd == pytest.approx((ended_months + 1.0) * 0.025)
        assert total.cost_usd == 0.0  # chip cost apart: cpu jobs cost nothing


def test_only_storage_events_count_in_seq_order() -> None:
    def event(seq: int, kind: str, days: float, **data: Any) -> JobEvent:
        return JobEvent(seq=seq, job_id="rl-000000000001", team="t", kind=kind, time=T0 + days * DAY, data=data)

    events = [event(3, "storage", 2, total_bytes=5), event(1, "storage", 1, total_bytes=7), event(2, "progress", 1, step=1)]
    assert samples_of(events) == {"rl-000000000001": [StorageSample(T0 + DAY, 7), StorageSample(T0 + 2 * DAY, 5)]}


def test_the_storage_price_setting_defaults_to_gcs_standard_and_refuses_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().usage_storage_price_usd_per_gib_month == 0.020
    monkeypatch.setenv("RLJOB_USAGE_STORAGE_PRICE_USD_PER_GIB_MONTH", "0.023")
    assert Settings().usage_storage_price_usd_per_gib_month == 0.023
    for bad in ("-1", "inf", "nan"):
        monkeypatch.setenv("RLJOB_USAGE_STORAGE_PRICE_USD_PER_GIB_MONTH", bad)
        with pytest.raises(ValidationError, match="usage_storage_price_usd_per_gib_month"):
            Settings()


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (10 * 1024, "10 KiB"),
        (190 * 2**20, "190 MiB"),
        (int(1.4 * GIB), "1.4 GiB"),
        (2**40, "1.0 TiB"),
    ],
)
def test_sizes_are_written_in_binary_units(count: int, text: str) -> None:
    assert human_bytes(count) == text


def test_the_storage_line_names_the_total_and_the_biggest_parts() -> None:
    sizes = [("rl/x/checkpoints/actor/3/a", 110 * 2**20), ("hf/m", 79 * 2**20), ("logs/t", 2**20), ("data/d", 512), ("spec.json", 10)]
    storage = RunStorage.of_files(sizes)
    assert storage_text(storage) == "190 MiB (checkpoints 110 MiB, export 79 MiB, logs 1.0 MiB, ...)"
    two = RunStorage.of_files(sizes[:2], complete=False)
    assert storage_text(two) == "189 MiB (checkpoints 110 MiB, export 79 MiB) (incomplete: walk limit)"
    assert storage_text(None) == "-"


def test_rljob_usage_and_status_show_the_run_directory(served: tuple[str, ManualClock, Any], tmp_path: Path) -> None:  # noqa: F811
    url, clock, api = served
    job_id = api.client.post("/v1/jobs", json=spec_body(tmp_path, name="stored"), headers=api.as_(TOKEN_A)).json()["id"]
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    ingest = api.client.app.state.runtime.jobs.ingest_progress
    train = RunStorage.of_files([("rl/x/checkpoints/actor/3/a", 2 * GIB), ("rl/x/checkpoints/actor/2/a", GIB)])
    export = RunStorage.of_files([("rl/x/checkpoints/actor/3/a", GIB), ("hf/m", GIB // 2)])
    api.progress.add(StorageMeasured(seq=0, time=clock(), job_id=job_id, stage="train", storage=train))
    ingest(job_id)  # logged at the service's clock: 3 GiB from now
    clock.advance(10 * 86400)
    api.progress.add(StorageMeasured(seq=1, time=clock(), job_id=job_id, stage="export", storage=export))
    ingest(job_id)  # 1.5 GiB from day 10
    clock.advance(20 * 86400)

    report = json.loads(_run(url, "--since", "2030-01-01", "-o", "json").stdout)
    assert report["storage_price_usd_per_gib_month"] == 0.020
    saved = {"freed_bytes": 0, "gib_months_saved": 0.0, "cost_saved_usd": 0.0}  # checkpoint retention deleted nothing
    assert report["jobs"][0]["storage"] == {"total_bytes": int(1.5 * GIB), "measurements": 2, "gib_months": 2.0, "cost_usd": 0.04, **saved}
    assert (report["total"]["storage_gib_months"], report["total"]["storage_cost_usd"]) == (2.0, 0.04)
    table = _run(url, "--since", "2030-01-01")
    assert table.exit_code == 0, table.output
    assert "GIB-MO" in table.output and "2.00" in table.output and "$0.04" in table.output
    assert "until deleted" in " ".join(table.output.split())

    status = CliRunner().invoke(cli, ["--url", url, "--token", TOKEN_A, "status", job_id], catch_exceptions=False)
    assert "storage 1.5 GiB (checkpoints 1.0 GiB, export 512 MiB)" in " ".join(status.output.split())
