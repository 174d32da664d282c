"""A write the database cannot take within RLJOB_REQUEST_WRITE_WAIT_S answers 503 with Retry-After and changes nothing
(issue 51 part 4). Before, a POST under a locked database waited 29.5 s, as long as the CLI's 30 s timeout: the
store's own busy timeout (10 s), once for each write queued before it on the service's write lock.

The database is locked by another connection (SQLite: BEGIN EXCLUSIVE on the file; PostgreSQL: the jobs table locked
in EXCLUSIVE mode, which lets reads through), the bound is made small, and each request runs in a thread joined
with a timeout well under the store's busy timeout: a request that waits the old way fails the join.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.domain.job_service import JobService
from service.domain.records.errors import StoreUnavailable
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body, wait_until

pytestmark = pytest.mark.timeout(90)

WRITE_WAIT_S = 0.5
JOIN_S = 5.0  # the bound and a turn of the app, far under the store's busy timeout (10 s) that an unbounded write waits
AUTH = {"Authorization": f"Bearer {TOKEN_A}"}


@pytest.fixture
def client(store: SqlJobStore, settings_factory: Callable[..., Any]) -> Iterator[TestClient]:
    add_test_tokens(store)
    app = create_app(settings_factory(request_write_wait_s=WRITE_WAIT_S), store=store, launcher=FakeLauncher(), progress=FakeProgress())
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield client


@contextmanager
def locked(store: SqlJobStore) -> Iterator[None]:
    """Another connection holds the database's write lock until the block ends."""
    if store.dialect == "sqlite":
        assert store.engine.url.database
        holder = sqlite3.connect(store.engine.url.database, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    engine = create_engine(store.engine.url)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(text("LOCK TABLE jobs IN EXCLUSIVE MODE"))  # reads go on; inserts and FOR UPDATE wait
            yield
    finally:
        engine.dispose()


def answered_within(call: Callable[[], httpx.Response], timeout_s: float) -> httpx.Response:
    """call() in a thread; its response, or a failure naming the wait when it has not come within timeout_s."""
    answer: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert answer, f"no answer within {timeout_s} s: the write waited for the database unbounded"
    return answer[0]


def _what_is_stored(store: SqlJobStore) -> tuple[list[tuple[str, str]], int]:
    return sorted((r.id, r.phase.value) for r in store.list_active()), store.max_event_seq()


def _assert_busy(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers.get("Retry-After")
    detail = response.json()["detail"]
    assert f"not free within {WRITE_WAIT_S:g} s" in detail and "nothing was stored" in detail, detail


def test_a_post_under_a_locked_database_answers_503_within_the_bound_and_changes_nothing(
    client: TestClient, store: SqlJobStore, tmp_path: Path
) -> None:
    job = client.post("/v1/jobs", json=spec_body(tmp_path, name="before"), headers=AUTH).json()
    assert job["phase"] == "LAUNCHING", job  # handed to the (fake) launcher: a cancel is a write to CANCELLING
    before = _what_is_stored(store)
    with locked(store):
        submitted = answered_within(lambda: client.post("/v1/jobs", json=spec_body(tmp_path, name="during"), headers=AUTH), JOIN_S)
        cancelled = answered_within(lambda: client.post(f"/v1/jobs/{job['id']}/cancel", headers=AUTH), JOIN_S)
        assert client.get(f"/v1/jobs/{job['id']}", headers=AUTH).status_code == 200  # reads go on
    _assert_busy(submitted)
    _assert_busy(cancelled)
    assert _what_is_stored(store) == before  # no job stored, no phase changed, no event written
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=AUTH).json()["phase"] == "CANCELLING"  # and after, it works


def test_a_post_behind_the_services_own_stuck_write_answers_503_within_the_bound(
    client: TestClient, store: SqlJobStore, tmp_path: Path
) -> None:
    """The service writes one at a time (its write lock): a leader's write stuck on the locked database holds that
    lock for the store's whole busy timeout. A request queued behind it waits at most the bound for it."""
    job = client.post("/v1/jobs", json=spec_body(tmp_path, name="before"), headers=AUTH).json()
    jobs: JobService = client.app.state.runtime.jobs  # type: ignore[attr-defined]
    with locked(store):
        stuck = threading.Thread(target=_post_message_ignoring_failure, args=(jobs, job["id"]), daemon=True)
        stuck.start()
        wait_until(lambda: _write_lock_held(jobs), timeout_s=5)
        cancelled = answered_within(lambda: client.post(f"/v1/jobs/{job['id']}/cancel", headers=AUTH), JOIN_S)
    stuck.join(timeout=15)
    _assert_busy(cancelled)


def _post_message_ignoring_failure(jobs: JobService, job_id: str) -> None:
    try:
        jobs.post_message(job_id, "a leader's write, waiting the store's busy timeout")
    except Exception:  # noqa: BLE001  the database was locked: what this test needs is that it waited
        pass


def _write_lock_held(jobs: JobService) -> bool:
    if jobs._lock.acquire(blocking=False):
        jobs._lock.release()
        return False
    return True


def test_a_transactions_wait_covers_the_writes_left_for_its_commit(client: TestClient, store: SqlJobStore, tmp_path: Path) -> None:
    """A change the session has not flushed yet is written at the commit: it too is within the wait."""
    job = client.post("/v1/jobs", json=spec_body(tmp_path, name="before"), headers=AUTH).json()
    refused: list[Exception] = []

    def change_message() -> None:
        try:
            with store.transaction(wait_s=WRITE_WAIT_S) as tx:
                record = tx.get(job["id"])
                assert record is not None
                record.message = "changed under the lock"
                tx.update(record)  # no statement yet: the session flushes it later
        except StoreUnavailable as e:
            refused.append(e)

    with locked(store):
        thread = threading.Thread(target=change_message, daemon=True)
        thread.start()
        thread.join(JOIN_S)
        assert not thread.is_alive(), f"the commit waited for the database past {JOIN_S} s"
    assert refused and "nothing was stored" in str(refused[0]), refused
    assert store.get(job["id"]).message != "changed under the lock"  # type: ignore[union-attr]
