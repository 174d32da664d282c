"""The report parts a record keeps typed (evaluations, run size, goodput by attempt; the fit estimate beside
them) are the models on the record and, in the store, the same JSON each part's column held before migration
0010 folded them into one report document. A part this version's model refuses is an error naming the job
and the part, never silently dropped."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from sqlalchemy import text

from service.adapters.store import SqlJobStore
from service.adapters.store.record_rows import StoredReportUnreadable
from service.domain.records.models import JobFilters, JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.run_report import RunReport
from tests.service.service_helpers import record_spec
from trainer.contract import RunStorage
from trainer.contract.run.evaluation import EvalSummary, paired_difference
from trainer.contract.run.goodput import TrainGoodput
from trainer.contract.spec.file import load_spec_file
from trainer.sizing.fit import estimate_job_fit

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TUTORIAL_EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "tutorial-llama31-8b-v6e8.yaml"
JOB = "rl-reportparts01"


def _parts():
    fit = estimate_job_fit(load_spec_file(TUTORIAL_EXAMPLE))
    assert fit is not None
    before = EvalSummary(
        label="before",
        step=0,
        n=4,
        correct=1,
        format_correct=4,
        partial_correct=1,
        mean_reward=0.25,
        samples_per_row=1,
        sampling="greedy, pass",
        rows_file="before.jsonl",
    )
    after = before.model_copy(
        update={
            "label": "after",
            "step": 9,
            "correct": 3,
            "rows_file": "after.jsonl",
            "vs_before": paired_difference({"a": 0, "b": 1}, {"a": 1, "b": 1}),
        }
    )
    storage = RunStorage.of_files([("checkpoints/1/x", 10), ("hf/model.safetensors", 5)])
    goodput = {1: TrainGoodput(elapsed_s=9.5, parts={"rollout": 4.0}, step=3), 2: TrainGoodput(elapsed_s=1.0, parts={}, final=True)}
    return fit, [before, after], storage, goodput


def _insert(store: SqlJobStore, **parts) -> None:
    with store.transaction() as tx:
        tx.insert(
            JobRecord(
                id=JOB,
                team="team-a",
                name="n",
                spec=record_spec(),
                spec_hash="x",
                phase=JobPhase.RUNNING,
                created_at=T0,
                updated_at=T0,
                **parts,
            )
        )


def _columns(store: SqlJobStore) -> dict:
    """The fit estimate's column and the report document's parts, as stored."""
    with store.engine.begin() as conn:
        row = conn.execute(text("SELECT fit_estimate, report FROM jobs WHERE id = :id"), {"id": JOB}).one()
    fit, report = (json.loads(v) if isinstance(v, str) else v for v in row)
    return {"fit_estimate": fit, **{k: report[k] for k in ("eval_points", "storage", "goodput")}}


def _set_report_part(store: SqlJobStore, key: str, value: object) -> None:
    with store.engine.begin() as conn:
        stored = conn.execute(text("SELECT report FROM jobs WHERE id = :id"), {"id": JOB}).scalar_one()
        report = json.loads(stored) if isinstance(stored, str) else stored
        conn.execute(text("UPDATE jobs SET report = :v WHERE id = :id"), {"v": json.dumps({**report, key: value}), "id": JOB})


def test_typed_parts_are_stored_as_the_json_their_columns_held_and_read_back_equal(store: SqlJobStore) -> None:
    fit, points, storage, goodput = _parts()
    _insert(store, fit_estimate=fit, report=RunReport(eval_points=points, storage=storage, goodput=goodput))
    # Each part as the JSON its own column held before migration 0010 folded them into the report.
    assert _columns(store) == {
        "fit_estimate": fit.model_dump(mode="json"),
        "eval_points": [p.model_dump(mode="json") for p in points],
        "storage": storage.model_dump(mode="json"),
        "goodput": {"1": goodput[1].model_dump(mode="json"), "2": goodput[2].model_dump(mode="json")},
    }
    listed = store.list_jobs(JobFilters(), before_pk=None, limit=5)[0][1]
    for record in (store.get(JOB), listed):  # the session read and the list's core-row read
        assert record is not None
        assert record.fit_estimate == fit and record.report.eval_points == points
        assert record.report.storage == storage and record.report.goodput == goodput


def test_each_attempts_first_goodput_report_survives_a_store_round_trip(store: SqlJobStore) -> None:
    """The warmup part (service/domain/cost/goodput.py) sets each attempt's first report against its newest: a
    service restarted mid-job must still have the first."""
    first = {1: TrainGoodput(elapsed_s=96.5, parts={"rollout": 30.7}, step=1), 2: TrainGoodput(elapsed_s=50.0, parts={}, step=21)}
    _insert(store, report=RunReport(goodput={1: TrainGoodput(elapsed_s=128.5, parts={"rollout": 50.6}, step=40)}, first_goodput=first))
    record = store.get(JOB)
    assert record is not None and record.report.first_goodput == first


def test_a_record_without_parts_stores_them_empty(store: SqlJobStore) -> None:
    _insert(store)
    assert _columns(store) == {"fit_estimate": None, "eval_points": [], "storage": None, "goodput": {}}
    record = store.get(JOB)
    assert record is not None and record.report.goodput == {} and record.report.eval_points == [] and record.report.storage is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("storage", {"total_bytes": "many", "parts": {}, "files": 0}),
        ("eval_points", [{"label": "before"}]),
        ("goodput", {"1": {"elapsed_s": 1, "parts": {}, "from_a_newer_version": 1}}),
    ],
)
def test_a_part_this_version_cannot_read_names_the_job_and_the_part(store: SqlJobStore, key: str, value: object) -> None:
    _insert(store)
    _set_report_part(store, key, value)
    with pytest.raises(StoredReportUnreadable, match=rf"job {JOB}: its stored report.{key} does not validate"):
        store.get(JOB)
    assert _columns(store)[key] == value  # nothing rewrote it
