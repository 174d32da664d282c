"""One Idempotency-Key sent at once to two replicas makes one job, and both answer with it: the replica
whose insert loses the race on the (team, key) unique index reads the winner's job instead of failing
with 500 (PostgreSQL's UniqueViolation)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from service.domain.job_writer import WriteRules
from service.domain.records.models import Caller, JobRecord
from service.domain.records.phases import JobPhase
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import spec_body
from trainer.contract import JobSpec

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]
TEAM_A = Caller(team="team-a", token_id="tok_a")
KEY = "submit-7f3a"


def test_the_replica_that_loses_the_insert_answers_with_the_winners_job(postgres_db: str, tmp_path: Path) -> None:
    store_a, store_b = SqlJobStore(postgres_db), SqlJobStore(postgres_db)
    store_a.migrate()
    spec = JobSpec.model_validate({**spec_body(tmp_path), "team": TEAM_A.team})
    now = datetime.now(UTC)
    winner = JobRecord(
        id="rl-winnerwinner",
        team=TEAM_A.team,
        name=spec.name,
        spec=spec,
        spec_hash=spec.content_hash(),
        idempotency_key=KEY,
        phase=JobPhase.QUEUED,
        created_at=now,
        updated_at=now,
        phase_entered_at=now,
    )
    inserted, answered = threading.Event(), threading.Event()
    results: list[object] = []

    def replica_a() -> None:  # has inserted, not yet committed, when replica B looks for the key
        with store_a.transaction() as tx:
            tx.insert(winner)
            inserted.set()
            time.sleep(1.0)  # B looks (finds nothing committed) and its insert waits on the unique index

    def replica_b() -> None:
        service = JobService(JobPorts(store_b, FakeLauncher(), FakeProgress()), writes=WriteRules(leads=lambda: False))
        try:
            results.append(service.submit(TEAM_A, spec, KEY))
        except Exception as e:  # noqa: BLE001 - what the API would turn into a 500
            results.append(e)
        answered.set()

    a = threading.Thread(target=replica_a)
    a.start()
    assert inserted.wait(10)
    b = threading.Thread(target=replica_b)
    b.start()
    a.join(10)
    b.join(20)
    try:
        assert answered.is_set()
        [(record, created)] = results  # not an IntegrityError
        assert isinstance(record, JobRecord) and record.id == winner.id and created is False
        assert [r.id for r in store_b.list_active()] == [winner.id]
    finally:
        store_a.close()
        store_b.close()
