"""The read path's costs, counted rather than timed: remembered tokens make no query (and a revocation
here is still effective on the very next request), a page of jobs loads its labels in one query, and
a job read is one connection. Queries are counted on the engine, as the database sees them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, text

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.records.errors import Unauthenticated
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.tokens import TokenCache, TokenService
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body, wait_until
from trainer.contract import JobSpec

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Counter:
    def __init__(self) -> None:
        self.statements: list[str] = []
        self.checkouts = 0


@contextmanager
def counting(store: SqlJobStore) -> Iterator[Counter]:
    """Every statement sent to the database and every connection taken from the pool, while inside."""
    counter = Counter()

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        counter.statements.append(statement)

    def on_checkout(*args: Any) -> None:
        counter.checkouts += 1

    event.listen(store.engine, "before_cursor_execute", on_execute)
    event.listen(store.engine.pool, "checkout", on_checkout)
    try:
        yield counter
    finally:
        event.remove(store.engine, "before_cursor_execute", on_execute)
        event.remove(store.engine.pool, "checkout", on_checkout)


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def store_jobs(store: SqlJobStore, count: int, team: str = "team-a") -> list[str]:
    ids = [f"rl-read{i:08d}" for i in range(count)]
    spec = JobSpec.model_validate(spec_body(Path("/tmp/rljob-read-path")))
    with store.transaction() as tx:
        for i, job_id in enumerate(ids):
            tx.insert(
                JobRecord(
                    id=job_id,
                    team=team,
                    name=f"job-{i}",
                    spec=spec.model_copy(update={"name": f"job-{i}"}),
                    spec_hash="h",
                    phase=JobPhase.SUCCEEDED,
                    created_at=T0 + timedelta(seconds=i),
                    updated_at=T0 + timedelta(seconds=i),
                    labels={"experiment": f"exp-{i}", "owner": "alice", "index": str(i)},
                )
            )
    return ids


def test_a_remembered_token_makes_no_query_and_an_expired_one_is_read_again(store: SqlJobStore) -> None:
    monotonic = FakeMonotonic()
    tokens = TokenService(store, cache=TokenCache(size=8, ttl_s=5.0, monotonic=monotonic))
    secret, record = tokens.create("team-a", name="alice")
    header = f"Bearer {secret}"
    with counting(store) as first:
        assert tokens.authenticate(header).token_id == record.id
    assert len(first.statements) == 1
    monotonic.now += 4.9
    with counting(store) as hit:
        assert tokens.cached_caller(header) is not None
        assert tokens.authenticate(header).token_id == record.id
    assert hit.statements == []
    monotonic.now += 0.1  # 5 s after it was read: no longer trusted
    assert tokens.cached_caller(header) is None
    with counting(store) as expired:
        assert tokens.authenticate(header).token_id == record.id
    assert len(expired.statements) == 1


def test_the_cache_is_keyed_by_the_hash_and_bounded_least_recently_used_first(store: SqlJobStore) -> None:
    tokens = TokenService(store, cache=TokenCache(size=2, ttl_s=60.0, monotonic=FakeMonotonic()))
    secrets = [tokens.create("team-a", name=f"user-{i}")[0] for i in range(3)]
    for secret in (secrets[0], secrets[1], secrets[0], secrets[2]):  # secrets[1] is now the least recent
        tokens.authenticate(f"Bearer {secret}")
    assert len(tokens.cache) == 2
    assert not any(secret in key for secret in secrets for key in tokens.cache._entries)
    assert tokens.cached_caller(f"Bearer {secrets[0]}") is not None
    assert tokens.cached_caller(f"Bearer {secrets[2]}") is not None
    assert tokens.cached_caller(f"Bearer {secrets[1]}") is None


def test_a_store_read_that_began_before_a_revocation_is_not_remembered(store: SqlJobStore) -> None:
    """authenticate() reads the record, a revocation drops the cache, then the stale read must not land."""
    tokens = TokenService(store, cache=TokenCache(size=8, ttl_s=60.0, monotonic=FakeMonotonic()))
    secret, record = tokens.create("team-a")
    real_read = store.token_by_hash

    def read_then_revoked_meanwhile(token_hash: str) -> Any:
        found = real_read(token_hash)
        tokens.revoke(record.id)
        return found

    store.token_by_hash = read_then_revoked_meanwhile  # type: ignore[method-assign]
    tokens.authenticate(f"Bearer {secret}")  # the read saw it valid: this request passes
    store.token_by_hash = real_read  # type: ignore[method-assign]
    assert tokens.cached_caller(f"Bearer {secret}") is None
    with pytest.raises(Unauthenticated):
        tokens.authenticate(f"Bearer {secret}")


def test_a_revocation_by_another_process_takes_effect_within_the_ttl(store: SqlJobStore) -> None:
    """What a revocation by `rljob token revoke` or another replica costs here: up to the TTL."""
    monotonic = FakeMonotonic()
    service = TokenService(store, cache=TokenCache(size=8, ttl_s=5.0, monotonic=monotonic))
    elsewhere = TokenService(store)
    secret, record = elsewhere.create("team-a")
    service.authenticate(f"Bearer {secret}")
    assert elsewhere.revoke(record.id)
    monotonic.now += 4.9
    service.authenticate(f"Bearer {secret}")  # still trusted: this process has not read the store since
    monotonic.now += 0.1
    with pytest.raises(Unauthenticated):
        service.authenticate(f"Bearer {secret}")


@pytest.fixture
def client(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, settings_factory: Callable[..., Settings]
) -> Iterator[TestClient]:
    TokenService(store).ensure(TOKEN_A, "team-a")
    # The progress poller and the event fan-out's reader stay quiet, so every query counted is the request's own.
    settings = settings_factory(token_cache_ttl_s=300, progress_poll_interval_s=3600, sse_poll_interval_s=3600)
    app = create_app(settings, store=store, launcher=fake_launcher, progress=fake_progress)
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN_A}"}) as test_client:
        wait_until(lambda: test_client.get("/readyz").status_code == 200)
        yield test_client


def test_a_token_revoked_through_the_service_is_refused_on_the_very_next_request(client: TestClient, store: SqlJobStore) -> None:
    [job_id] = store_jobs(store, 1)
    assert client.get(f"/v1/jobs/{job_id}").status_code == 200
    with counting(store) as cached:
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
    assert not any("api_tokens" in statement for statement in cached.statements)  # it was served from the cache
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    caller = runtime.tokens.authenticate(f"Bearer {TOKEN_A}")
    assert runtime.tokens.revoke(caller.token_id)
    response = client.get(f"/v1/jobs/{job_id}")
    assert response.status_code == 401
    assert TOKEN_A not in response.text


def test_reading_a_job_is_one_connection_and_two_queries_with_its_labels(client: TestClient, store: SqlJobStore) -> None:
    [job_id] = store_jobs(store, 1)
    client.get("/v1/jobs?limit=1")  # the token is remembered from here on
    with counting(store) as read:
        body = client.get(f"/v1/jobs/{job_id}").json()
    assert body["labels"] == {"experiment": "exp-0", "owner": "alice", "index": "0"}
    assert read.checkouts == 1
    assert len(read.statements) == 2, read.statements


@pytest.mark.parametrize("limit", [5, 50])
def test_a_page_of_jobs_loads_its_labels_in_one_query_whatever_its_size(client: TestClient, store: SqlJobStore, limit: int) -> None:
    store_jobs(store, 60)
    client.get("/v1/jobs?limit=1")
    with counting(store) as listing:
        page = client.get(f"/v1/jobs?limit={limit}").json()
    assert page["count"] == limit
    assert [job["labels"]["index"] for job in page["data"]] == [str(i) for i in range(59, 59 - limit, -1)]
    assert listing.checkouts == 1
    assert len(listing.statements) == 2, listing.statements  # the page, then the labels of all its jobs


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_a_read_on_a_connection_the_database_dropped_is_retried_once(store: SqlJobStore, db_url: str) -> None:
    """No pre-ping round trip per checkout: a pooled connection the server closed (a restart, an idle
    timeout) fails one attempt, and the read is made again on a new connection."""
    [job_id] = store_jobs(store, 1)
    assert store.get(job_id) is not None  # the pool now holds a connection
    killer = SqlJobStore(db_url)
    with killer.engine.connect() as conn:
        ended = conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalar()
    killer.close()
    assert ended and ended >= 1
    record = store.get(job_id)
    assert record is not None and record.labels["index"] == "0"


def test_the_pool_holds_a_connection_per_worker_thread_and_keeps_them(db_url: str) -> None:
    """As many reads at once as the thread pool runs sync routes, each holding a connection, and a
    second round opens no new connection (an overflow connection is opened and closed per checkout)."""
    workers = anyio.run(_default_thread_limit)
    store = SqlJobStore(db_url)
    store.migrate()
    [job_id] = store_jobs(store, 1)
    all_checked_out = threading.Barrier(workers, timeout=10)
    connects = []
    event.listen(store.engine.pool, "checkout", lambda *args: all_checked_out.wait())
    event.listen(store.engine.pool, "connect", lambda *args: connects.append(1))
    try:
        with ThreadPoolExecutor(workers) as pool:
            for _ in range(2):
                connects.clear()
                assert all(record is not None for record in pool.map(lambda _: store.get(job_id), range(workers)))
        assert connects == []  # the second round: every connection came back to the pool and was reused
    finally:
        store.close()


async def _default_thread_limit() -> int:
    return int(anyio.to_thread.current_default_thread_limiter().total_tokens)
