"""Status reads and list pages from the records held in memory (SQLite, one writing process): counted
queries, never a stale answer after a write, an ended job's JSON kept while a running job's moves with
the clock, and the bytes are the JSON the schema's model gives."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.adapters.store import SqlJobStore
from service.adapters.store.shared_records import SharedRecords
from service.app import create_app
from service.config import Settings
from service.domain.records.models import JobPublic, JobRecord, JobsPublic
from service.domain.records.phases import JobPhase
from service.domain.records.run_report import RunReport
from service.domain.tokens import TokenService
from tests.service.adapters.store.test_read_path import counting
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, ManualClock, record_spec, spec_body, wait_until
from trainer.contract import JobSpec

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def store_job(store: SqlJobStore, index: int, phase: JobPhase = JobPhase.SUCCEEDED) -> str:
    job_id = f"rl-shared{index:06d}"
    spec = JobSpec.model_validate(spec_body(Path("/tmp/rljob-shared-reads")))
    created = T0 + timedelta(seconds=index)
    ended = phase.is_terminal()
    with store.transaction() as tx:
        tx.insert(
            JobRecord(
                id=job_id,
                team="team-a",
                name=f"job-{index}",
                spec=spec,
                spec_hash="h",
                phase=phase,
                created_at=created,
                updated_at=created,
                started_at=created,
                finished_at=created + timedelta(minutes=30) if ended else None,
                phase_entered_at=created + timedelta(minutes=30) if ended else created,
                labels={"index": str(index)},
                phase_seconds={"RUNNING": 1800.0} if ended else {},
                report=RunReport(step=2, total_steps=4),
            )
        )
    return job_id


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlJobStore]:
    s = SqlJobStore(f"sqlite:///{tmp_path / 'rljob.db'}", shared_reads=64)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0 + timedelta(hours=2))


@pytest.fixture
def client(
    store: SqlJobStore,
    clock: ManualClock,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    settings_factory: Callable[..., Settings],
) -> Iterator[TestClient]:
    TokenService(store).ensure(TOKEN_A, "team-a")
    settings = settings_factory(token_cache_ttl_s=300, progress_poll_interval_s=3600, sse_poll_interval_s=3600)
    app = create_app(settings, store=store, launcher=fake_launcher, progress=fake_progress, clock=clock)
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN_A}"}) as test_client:
        wait_until(lambda: test_client.get("/readyz").status_code == 200)
        test_client.get("/v1/jobs?limit=1")  # the token is remembered from here on
        yield test_client


def public_of(client: TestClient, store: SqlJobStore, job_id: str) -> JobPublic:
    record = store.get(job_id)
    assert record is not None
    return client.app.state.runtime.public(record)  # type: ignore[attr-defined,no-any-return]


def test_an_ended_job_is_read_from_the_store_once_and_answers_the_models_json(client: TestClient, store: SqlJobStore) -> None:
    job_id = store_job(store, 1)
    with counting(store) as first:
        body = client.get(f"/v1/jobs/{job_id}").content
    assert len(first.statements) == 2  # the row, its labels
    with counting(store) as again:
        assert client.get(f"/v1/jobs/{job_id}").content == body
    assert again.statements == [] and again.checkouts == 0
    assert body == public_of(client, store, job_id).model_dump_json().encode()
    assert json.loads(body) == public_of(client, store, job_id).model_dump(mode="json")


def test_a_write_through_the_service_is_seen_by_the_very_next_read(client: TestClient, store: SqlJobStore, tmp_path: Path) -> None:
    job_id = client.post("/v1/jobs", json=spec_body(tmp_path)).json()["id"]
    before = client.get(f"/v1/jobs/{job_id}").json()["phase"]
    assert client.get(f"/v1/jobs/{job_id}").json()["phase"] == before  # now held in memory
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    after = client.get(f"/v1/jobs/{job_id}").json()["phase"]
    assert after in (JobPhase.CANCELLING, JobPhase.CANCELLED) and after == store.get(job_id).phase  # type: ignore[union-attr]


def test_a_running_job_is_rendered_at_each_reads_time_from_the_held_record(
    client: TestClient, store: SqlJobStore, clock: ManualClock
) -> None:
    job_id = store_job(store, 2, JobPhase.RUNNING)
    first = client.get(f"/v1/jobs/{job_id}").json()
    clock.advance(600)
    with counting(store) as again:
        second = client.get(f"/v1/jobs/{job_id}").json()
    assert again.statements == []
    assert second["goodput"]["wall_s"] == pytest.approx(first["goodput"]["wall_s"] + 600)
    assert second == public_of(client, store, job_id).model_dump(mode="json")


def test_a_running_jobs_answer_is_reused_for_a_second_of_the_clock_and_never_past_a_write(
    client: TestClient, store: SqlJobStore, clock: ManualClock
) -> None:
    job_id = store_job(store, 3, JobPhase.RUNNING)
    first = client.get(f"/v1/jobs/{job_id}").content
    clock.advance(0.9)
    assert client.get(f"/v1/jobs/{job_id}").content == first  # the same rendering, though goodput's wall moved 0.9 s
    clock.advance(0.2)
    later = client.get(f"/v1/jobs/{job_id}").json()
    assert later["goodput"]["wall_s"] == pytest.approx(json.loads(first)["goodput"]["wall_s"] + 1.1)
    assert later == public_of(client, store, job_id).model_dump(mode="json")
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200  # a write, at the same instant of the clock
    assert client.get(f"/v1/jobs/{job_id}").json()["phase"] == store.get(job_id).phase != JobPhase.RUNNING  # type: ignore[union-attr]


def test_another_teams_job_and_a_malformed_id_are_404_from_memory_too(client: TestClient, store: SqlJobStore) -> None:
    job_id = store_job(store, 3)
    with store.transaction() as tx:
        record = tx.get(job_id)
        assert record is not None
        record.team = "team-b"
        tx.update(record)
    assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    assert client.get(f"/v1/jobs/{job_id}").status_code == 404  # held now: still not visible
    assert client.get("/v1/jobs/RL-NOT-AN-ID").status_code == 404


def test_a_page_reads_only_its_ids_once_its_records_are_held_and_shows_each_write(client: TestClient, store: SqlJobStore) -> None:
    ids = [store_job(store, i) for i in range(60)]
    with counting(store) as first:
        page = client.get("/v1/jobs?limit=50").content
    assert first.checkouts == 1 and len(first.statements) == 3  # the page's ids, the rows, their labels
    with counting(store) as again:
        assert client.get("/v1/jobs?limit=50").content == page
    assert again.checkouts == 1 and len(again.statements) == 1
    parsed = JobsPublic.model_validate_json(page)
    assert [job.id for job in parsed.data] == ids[:9:-1] and parsed.count == 50 and parsed.next_cursor
    expected = JobsPublic(data=[public_of(client, store, i) for i in ids[:9:-1]], count=50, next_cursor=parsed.next_cursor)
    assert page == expected.model_dump_json().encode()
    rest = client.get(f"/v1/jobs?limit=50&cursor={parsed.next_cursor}").json()
    assert [job["id"] for job in rest["data"]] == ids[9::-1] and rest["next_cursor"] is None
    with store.transaction() as tx:
        record = tx.get(ids[-1])
        assert record is not None
        record.message = "changed"
        tx.update(record)
    assert client.get("/v1/jobs?limit=1").json()["data"][0]["message"] == "changed"


def test_a_read_that_began_before_a_write_is_not_kept() -> None:
    shared = SharedRecords(size=2)

    def record_of(job_id: str) -> JobRecord:
        return JobRecord(
            id=job_id, team="t", name="n", spec=record_spec(), spec_hash="h", phase=JobPhase.RUNNING, created_at=T0, updated_at=T0
        )

    record = record_of("rl-aaaaaaaaaaaa")
    generation = shared.generation  # the read starts
    shared.drop(["rl-aaaaaaaaaaaa"])  # a write commits meanwhile
    shared.put(record, read_at_generation=generation)
    assert shared.get(record.id) is None
    shared.put(record, read_at_generation=shared.generation)
    assert shared.get(record.id) is record
    for i in range(3):
        shared.put(record_of(f"rl-bbbbbbbbbbb{i}"), read_at_generation=shared.generation)
    assert len(shared) == 2 and shared.get(record.id) is None  # bounded, least recently used first


def test_a_held_jobs_read_is_answered_before_the_router_as_the_route_answers_it(client: TestClient, store: SqlJobStore) -> None:
    """api/status_shortcut.py: once the record is held, the read does not reach the route; its bytes and headers are
    the route's, and the latency histogram counts it under the route's path."""
    job_id = store_job(store, 4, JobPhase.RUNNING)
    views = client.app.state.serving.views  # type: ignore[attr-defined]
    routed = []
    status = views.status

    async def counted(caller, found):  # type: ignore[no-untyped-def]
        routed.append(found)
        return await status(caller, found)

    views.status = counted
    first = client.get(f"/v1/jobs/{job_id}")  # read from the store through the route: now held
    second = client.get(f"/v1/jobs/{job_id}")
    assert routed == [job_id]
    assert second.content == first.content and second.headers["content-type"] == first.headers["content-type"] == "application/json"
    assert second.headers["content-length"] == first.headers["content-length"]
    metrics = client.get("/metrics").text
    assert 'rljob_api_request_duration_seconds_count{method="GET",route="/v1/jobs/{job_id}",status="200"} 2.0' in metrics
    with store.transaction() as tx:  # another team's now: the route answers, and says 404
        record = tx.get(job_id)
        assert record is not None
        record.team = "team-b"
        tx.update(record)
    assert [client.get(f"/v1/jobs/{job_id}").status_code for _ in range(2)] == [404, 404]
    assert routed == [job_id] * 3
