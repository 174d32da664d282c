"""The leader locks and the leadership loop, on the real databases; and the event log's order when
several replicas write to it at once."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from service.adapters.leader_locks import (
    LEADER_LOCK_KEY,
    FileLock,
    PostgresAdvisoryLock,
    ProcessLock,
    StateDirInUse,
    leader_lock_for,
)
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.leadership import Leadership
from tests.service.service_helpers import TOKEN_A, record_spec

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def test_the_lock_is_chosen_by_the_database() -> None:
    assert isinstance(leader_lock_for("postgresql+psycopg://u@127.0.0.1:1/db"), PostgresAdvisoryLock)
    assert isinstance(leader_lock_for("sqlite:////tmp/x/rljob.db"), FileLock)
    assert isinstance(leader_lock_for("sqlite://"), ProcessLock)
    assert isinstance(leader_lock_for(None), ProcessLock)


@pytest.mark.postgres
def test_one_advisory_lock_holder_at_a_time_and_the_next_takes_it_when_the_connection_dies(postgres_db: str) -> None:
    first, second = PostgresAdvisoryLock(postgres_db), PostgresAdvisoryLock(postgres_db)
    admin = create_engine(postgres_db, isolation_level="AUTOCOMMIT")
    try:
        assert first.try_acquire() and first.holds()
        assert not second.try_acquire()
        # What a dead leader looks like to the database: its session ends.
        with admin.connect() as conn:
            killed = (
                conn.execute(
                    text("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = :lo"),
                    {"lo": LEADER_LOCK_KEY & 0xFFFF_FFFF},
                )
                .scalars()
                .all()
            )
        assert killed == [True]
        assert not first.holds()  # the old leader finds out at its next check
        assert second.try_acquire() and second.holds()
        assert not first.try_acquire()
    finally:
        first.release()
        second.release()
        admin.dispose()


@pytest.mark.postgres
def test_leadership_moves_to_the_waiting_replica_and_each_term_starts_and_stops_once(postgres_db: str) -> None:
    calls: list[str] = []
    terms = itertools.count(1)  # the database's leader_terms row, as far as these two are concerned
    a = Leadership(
        PostgresAdvisoryLock(postgres_db),
        take_term=lambda: next(terms),
        on_elected=lambda t: calls.append(f"a+{t}"),
        on_deposed=lambda: calls.append("a-"),
        check_interval_s=0.05,
    )
    b = Leadership(
        PostgresAdvisoryLock(postgres_db),
        take_term=lambda: next(terms),
        on_elected=lambda t: calls.append(f"b+{t}"),
        on_deposed=lambda: calls.append("b-"),
        check_interval_s=0.05,
    )
    a.start()
    b.start()
    try:
        assert (a.role, b.role) == ("leader", "follower")
        a.stop()  # a rolling update: the old pod stops and lets go
        deadline = threading.Event()
        for _ in range(100):
            if b.leads:
                break
            deadline.wait(0.05)
        assert b.leads and calls == ["a+1", "a-", "b+2"]
    finally:
        b.stop()
    assert calls == ["a+1", "a-", "b+2", "b-"]


def test_a_failed_start_of_the_leaders_work_gives_the_lead_up(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "rljob.db.serve-lock")
    calls: list[str] = []

    def boom(term: int) -> None:
        calls.append("elected")
        raise RuntimeError("launcher could not start")

    leadership = Leadership(lock, take_term=lambda: 1, on_elected=boom, on_deposed=lambda: calls.append("deposed"), check_interval_s=1)
    leadership.start()
    assert not leadership.leads and calls == ["elected", "deposed"] and not lock.holds()
    leadership.stop()


def _ready(client: TestClient, timeout_s: float = 20.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    body: dict[str, object] = client.get("/readyz").json()
    while body.get("reason") == "recovering jobs" and time.monotonic() < deadline:
        time.sleep(0.05)
        body = client.get("/readyz").json()
    return body


def test_a_second_service_on_the_same_sqlite_state_dir_refuses_to_start(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", bootstrap_token=TOKEN_A, bootstrap_team="team-a")
    with TestClient(create_app(settings)) as first:
        # Ready once its start-up recovery has run (a thread of its own: on a loaded machine not yet at the first read).
        assert _ready(first) == {"ready": True, "role": "leader"}
        with pytest.raises(StateDirInUse, match="one process per state directory"), TestClient(create_app(settings)):
            pass
    with TestClient(create_app(settings)) as again:  # the first let go when it stopped
        assert again.get("/readyz").json()["role"] == "leader"


def _record(job_id: str) -> JobRecord:
    return JobRecord(
        id=job_id, team="team-a", name="n", spec=record_spec(), spec_hash="x", phase=JobPhase.QUEUED, created_at=T0, updated_at=T0
    )


@pytest.mark.postgres
@pytest.mark.parametrize("first_writes", ["one event", "a batch"])
def test_event_seqs_commit_in_order_across_writers(postgres_db: str, first_writes: str) -> None:
    """A stream reads events by seq: it must never see seq n+1 while n may still commit, or it skips n.
    The writer that took the next seq later waits for the earlier one's commit (the event-order lock), whether
    the first wrote one event or a batch (append_events: a trainer's events, one INSERT)."""
    one, two = SqlJobStore(postgres_db), SqlJobStore(postgres_db)
    one.migrate()
    try:
        with one.transaction() as tx:
            tx.insert(_record("rl-000000000001"))
            tx.insert(_record("rl-000000000002"))
        holding, second_done = threading.Event(), threading.Event()
        release = threading.Event()

        def slow_writer() -> None:
            with one.transaction() as tx:
                record = _record("rl-000000000001")
                if first_writes == "one event":
                    tx.append_event(record, "message", {"message": "first"}, T0)
                else:
                    tx.append_events(record, [("message", {"message": "first"}), ("message", {"message": "first, b"})], T0)
                holding.set()
                release.wait(10)

        def fast_writer() -> None:
            with two.transaction() as tx:
                tx.append_event(_record("rl-000000000002"), "message", {"message": "second"}, T0)
            second_done.set()

        slow = threading.Thread(target=slow_writer)
        slow.start()
        assert holding.wait(10)
        fast = threading.Thread(target=fast_writer)
        fast.start()
        assert not second_done.wait(0.5)  # it waits for the first writer's commit
        assert two.events_after(0) == []  # nothing a reader could skip past
        release.set()
        slow.join(10)
        fast.join(10)
        events = two.events_after(0)
        firsts = ["first"] if first_writes == "one event" else ["first", "first, b"]
        assert [e.data["message"] for e in events] == [*firsts, "second"]
        assert [e.seq for e in events] == sorted(e.seq for e in events)
    finally:
        one.close()
        two.close()


@pytest.mark.postgres
def test_a_leader_that_loses_its_lock_stops_leading_and_leads_again_when_it_can(
    postgres_db: str, settings_factory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.service.service_helpers import SUPERVISOR_LOOPS, spec_body, supervisor_threads, wait_for_phase, wait_until

    earlier = set(threading.enumerate())
    caplog.set_level(logging.INFO, logger="service.leadership")
    settings = settings_factory(database_url=postgres_db, bootstrap_token=TOKEN_A, bootstrap_team="team-a", leader_check_interval_s=0.05)
    auth = {"Authorization": f"Bearer {TOKEN_A}"}
    admin = create_engine(postgres_db, isolation_level="AUTOCOMMIT")
    with TestClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").json().get("role") == "leader")
        with admin.connect() as conn:  # the lock's connection dies (a database failover, a network cut)
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = :lo"),
                {"lo": LEADER_LOCK_KEY & 0xFFFF_FFFF},
            )
        wait_until(lambda: "this replica lost the leader lock" in caplog.text, timeout_s=10)
        # Nobody else holds it: the same replica takes it again, re-attaches, and its new term works.
        wait_until(lambda: client.get("/readyz").json() == {"ready": True, "role": "leader"}, timeout_s=60)
        # The lost term's supervisor was stopped before the new one started: one of each loop, not two.
        assert supervisor_threads(earlier) == dict.fromkeys(SUPERVISOR_LOOPS, 1)
        job = client.post("/v1/jobs", json=spec_body(tmp_path, labels={"fake-steps": "1"}), headers=auth).json()["id"]
        wait_for_phase(lambda: client.get(f"/v1/jobs/{job}", headers=auth).json()["phase"], JobPhase.SUCCEEDED, timeout_s=60)
    admin.dispose()
    assert caplog.text.count("this replica leads") == 2


class _FenceOnFirstLook(threading.Event):
    """The pending-fence flag of a Leadership whose fence lands right after check_once's first look at it: the
    interleaving of the check thread and a refused write's fence, made deterministic."""

    def __init__(self) -> None:
        super().__init__()
        self.fence: Callable[[], None] | None = None

    def is_set(self) -> bool:
        seen = super().is_set()
        fence, self.fence = self.fence, None
        if fence is not None:
            fence()  # after the look: check_once goes on as if it saw no fence
        return seen


def test_a_fence_between_the_check_and_its_lock_does_not_lead_again(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "rljob.db.serve-lock")
    calls: list[str] = []
    deposed = threading.Event()

    def on_deposed() -> None:
        calls.append("deposed")
        deposed.set()

    leadership = Leadership(
        lock,
        take_term=lambda: len(calls) + 1,
        on_elected=lambda term: calls.append(f"elected {term}"),
        on_deposed=on_deposed,
        check_interval_s=1,
    )
    leadership.start()
    assert leadership.leads and calls == ["elected 1"]
    pending = _FenceOnFirstLook()
    pending.fence = leadership.fenced
    leadership._fence_pending = pending
    # The successor let the lock go already (what makes the window reachable): the check could take it at once.
    lock.release()
    with leadership._changing:  # the fence's depose waits for the check, as it would on the lock
        leadership.check_once()
        assert not leadership.leads and calls == ["elected 1"], "led again while the fenced term's work was still running"
    assert deposed.wait(10) and calls == ["elected 1", "deposed"]
    leadership.stop()
