"""A stored spec this version's JobSpec refuses is read as a clear error naming the job and the field
(a spec model tightened without a data migration), on the session read and the shared read alike."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from service.adapters.store import SqlJobStore
from service.adapters.store.record_rows import StoredSpecUnreadable
from service.cli.client import read_answer
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import record_spec
from trainer.contract import JobSpec

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _stored_with(store: SqlJobStore, job_id: str, grpo_field: str, value: object) -> dict:
    """A job whose stored spec has grpo.<grpo_field> = value, written as an older version could have: the spec JSON."""
    spec = record_spec()
    with store.transaction() as tx:
        tx.insert(
            JobRecord(id=job_id, team="team-a", name="n", spec=spec, spec_hash="x", phase=JobPhase.QUEUED, created_at=T0, updated_at=T0)
        )
    stored = spec.model_dump(mode="json")
    stored["grpo"][grpo_field] = value
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET spec = :spec WHERE id = :id"), {"spec": json.dumps(stored), "id": job_id})
    return stored


def test_a_stored_spec_the_model_refuses_names_the_job_and_the_field(store: SqlJobStore) -> None:
    _stored_with(store, "rl-oldspec00001", "batch_size", -1)  # what an older, looser model could have accepted
    with pytest.raises(StoredSpecUnreadable, match=r"job rl-oldspec00001: .*grpo\.batch_size.*data migration"):
        store.get("rl-oldspec00001")
    with pytest.raises(StoredSpecUnreadable, match="rl-oldspec00001"), store.transaction() as tx:
        tx.get("rl-oldspec00001")


def test_a_spec_stored_before_a_refusal_was_added_stays_readable_while_new_ones_are_refused(store: SqlJobStore) -> None:
    """grpo.loss_agg_mode sequence-mean-token-scale was accepted before rljob learnt MaxText 0.2.5 refuses it: a job
    stored with it reads back as it asked (a refusal applies to new submissions), and the same spec submitted now is
    refused."""
    stored = _stored_with(store, "rl-oldspec00002", "loss_agg_mode", "sequence-mean-token-scale")
    assert store.get("rl-oldspec00002").spec.grpo.loss_agg_mode == "sequence-mean-token-scale"
    assert read_answer(JobSpec, stored).grpo.loss_agg_mode == "sequence-mean-token-scale"  # `rljob status`/`list` read it
    with pytest.raises(ValidationError, match="MaxText 0.2.5's train_rl refuses it"):
        JobSpec.model_validate(stored)
