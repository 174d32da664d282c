"""Migration 0010 on a database the previous release wrote: every API answer is the same after the upgrade, and a
rollback gives back the previous release's rows, on SQLite and PostgreSQL.

migration_data/jobs_at_0009.json holds three jobs (running mid-train, finished with evaluations, artifacts,
storage and an outcome, and resumed once with goodput from two attempts) written through the job service of the
last release before 0010, at revision 0009: their raw jobs and job_labels rows, and their API JSON at a fixed time.
"""

from __future__ import annotations

import json
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from pydantic import BaseModel, TypeAdapter
from sqlalchemy import text

from service.adapters.store import SqlJobStore
from service.adapters.store.migrate import alembic_config
from service.domain.views import to_public
from trainer.contract.spec.job import JobSpec

FIXTURE = Path(__file__).parent / "migration_data" / "jobs_at_0009.json"
REPORT_COLUMNS = set(
    "attempt last_trainer_seq stage step total_steps latest_metrics recent_train_steps stage_times artifacts run_finished "
    "eval_points storage goodput trainer_events".split()
)


@pytest.fixture
def previous_release(db_url: str) -> Any:
    """A store whose database is at 0009, holding the previous release's rows."""
    data = json.loads(FIXTURE.read_text())
    assert data["alembic_revision"] == "0009"
    store = SqlJobStore(db_url)
    command.upgrade(alembic_config(store.engine), "0009")
    with store.engine.begin() as conn:
        for table, rows in (("jobs", data["jobs"]), ("job_labels", data["job_labels"])):
            for row in rows:
                names = ", ".join(row)
                conn.execute(text(f"INSERT INTO {table} ({names}) VALUES ({', '.join(':' + n for n in row)})"), row)
    yield store, data
    store.close()


def _columns(store: SqlJobStore) -> set[str]:
    return {c["name"] for c in sa.inspect(store.engine).get_columns("jobs")}


def _normal(value: Any, is_json: bool) -> Any:
    """A stored value as comparable across drivers: JSON parsed, a time as SQLite writes it (UTC, naive)."""
    if isinstance(value, datetime):
        moment = value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
    if is_json and isinstance(value, str):
        return json.loads(value)
    return value


def _raw_jobs(store: SqlJobStore) -> list[dict[str, Any]]:
    json_columns = {c["name"] for c in sa.inspect(store.engine).get_columns("jobs") if isinstance(c["type"], sa.JSON)}
    with store.engine.begin() as conn:
        rows = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM jobs ORDER BY pk"))]
    return [{k: _normal(v, k in json_columns) for k, v in row.items()} for row in rows]


# evaluation: issue 36 (an eval job's; null for the training jobs stored then); checkpoint_expiry, estimate, hold: issue 37
# (retention, the submit-time estimate, budget holds); reward_calls: issue 38 (the reward sandbox's counts)
ADDED_SINCE_0009 = ("placement", "eval_job", "checkpoint_expiry", "estimate", "estimate_actuals", "hold", "reward_calls")


def _spec_fields_added_since(model: type[BaseModel], today: dict[str, Any], then: dict[str, Any], where: str) -> list[str]:
    """Drop from `today` (a spec as the API shows it now) each field the stored answer `then` lacks, checking it shows
    the default its model declares (trainer/contract/spec/hashing.py: a field's default never changes once added, so a
    spec stored before it means that default); recurse where both have a nested model. The fields dropped, by path."""
    dropped = []
    for name, info in model.model_fields.items():
        if name not in today:
            continue
        if name not in then:
            default = TypeAdapter(info.annotation).dump_python(info.get_default(call_default_factory=True), mode="json")
            assert today.pop(name) == default, f"{where}.{name}"
            dropped.append(f"{where}.{name}")
            continue
        nested = [k for k in (info.annotation, *typing.get_args(info.annotation)) if isinstance(k, type) and issubclass(k, BaseModel)]
        if nested and isinstance(today[name], dict) and isinstance(then[name], dict):
            dropped += _spec_fields_added_since(nested[0], today[name], then[name], f"{where}.{name}")
    return dropped


def test_the_upgrade_folds_the_columns_into_the_report_and_every_api_answer_is_unchanged(previous_release: Any) -> None:
    store, data = previous_release
    assert REPORT_COLUMNS <= _columns(store)
    store.migrate()  # 0009 -> head
    assert not REPORT_COLUMNS & _columns(store) and "report" in _columns(store)
    as_of = datetime.fromisoformat(data["as_of"])
    for job_id, answer in data["api"].items():
        record = store.get(job_id)
        assert record is not None
        public = to_public(record, as_of).model_dump(mode="json")
        # Fields later revisions added to the answer, empty for a job stored before them (0011: placement).
        for added in ADDED_SINCE_0009:
            assert public.pop(added) is None, (job_id, added)
        # Spec fields added since 0009 (issues 36-39, 66, 67), each at the default its model declares.
        added = _spec_fields_added_since(JobSpec, public["spec"], answer["spec"], "spec")
        assert {"spec.eval", "spec.grpo.rewards.on_error", "spec.model.logits_dtype"} <= set(added), (job_id, added)
        assert public.pop("attached_evals") == [], job_id  # issue 36: eval jobs attached to a job (none for those stored then)
        # issue 68: the release's answer named the in-training evaluations `eval`; the same value has one name now
        public["eval"] = public.pop("train_evals")
        if fit := public["fit_estimate"]:  # issue 52: the estimate's phases and two parts, empty for one stored before
            assert (fit.pop("phases"), fit.pop("peak_phase")) == ([], ""), job_id
            assert (fit["per_chip"].pop("decode_weights"), fit["per_chip"].pop("logprobs")) == (0, 0), job_id
        assert (public.pop("hangs"), public.pop("hung_restarts")) == ([], 0), job_id  # issue 38: hung attempts
        # issue 67: the first step's warmup, a part of its own; none for a job stored before it kept first reports
        if public["goodput"]:
            assert public["goodput"]["parts"].pop("warmup") == 0.0, job_id
        if public["usage"] and "warmup" in public["usage"]["parts"]:
            assert public["usage"]["parts"].pop("warmup") == {"seconds": 0.0, "chip_hours": 0.0}, job_id
        assert public == answer, job_id
    # What the API does not show, the report still holds as the columns did: where event reading resumes, how the run ended.
    for row in data["jobs"]:
        record = store.get(row["id"])
        assert record is not None and record.report.last_trainer_seq == row["last_trainer_seq"] > 0
        outcome = json.loads(row["run_finished"])
        assert (record.report.outcome.model_dump() if record.report.outcome else None) == outcome
    assert any(json.loads(row["run_finished"]) for row in data["jobs"])  # the finished job's outcome is among them
    resumed = store.get(next(j["id"] for j in data["jobs"] if j["name"] == "resumed-job"))
    assert resumed is not None and resumed.resumes == 1 and resumed.report.attempt == 2 and sorted(resumed.report.goodput) == [1, 2]


def test_a_rollback_gives_back_the_previous_releases_rows(previous_release: Any) -> None:
    store, data = previous_release
    before = _raw_jobs(store)
    store.migrate()
    command.downgrade(alembic_config(store.engine), "0009")
    assert "report" not in _columns(store)
    assert _raw_jobs(store) == before
