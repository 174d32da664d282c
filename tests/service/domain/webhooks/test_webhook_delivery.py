"""Webhook delivery against real receivers on loopback (tests/service/domain/webhooks/webhook_receiver.py): the leader's dispatcher
(service/domain/webhooks/webhook_dispatch.py) on a real database with the real HTTP sender. Retries after 500s, a receiver
that never answers, a redirect, a leader failover between two instances on one database, and two replicas' senders
racing for one delivery (the lease keeps the second away)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, func, select

from service.adapters.store import SqlJobStore
from service.adapters.store.tables import WebhookDeliveryRow
from service.adapters.store.webhook_rows import SqlWebhookQueue
from service.adapters.webhook_sender import HttpWebhookTransport
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.records.ports import utc_now
from service.domain.webhooks.webhook_dispatch import DeliveryPolicy, WebhookDispatcher
from service.domain.webhooks.webhook_models import Claim, DeliveryState, SendResult, WebhookDeliveryPublic, WebhookEndpoint
from service.leader_rounds import RoundLoops
from tests.service.domain.webhooks.webhook_receiver import Receiver, serving, silent, verify
from tests.service.service_helpers import record_spec, wait_until

SECRET = b"test-secret-for-webhooks"
FAST = DeliveryPolicy(
    connect_timeout_s=0.5, read_timeout_s=0.5, max_attempts=4, retry_base_s=0.02, retry_max_s=0.1, idle_check_s=0.05, lease_margin_s=0.3
)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqlJobStore]:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'rljob.db'}")
    store.migrate()
    yield store
    store.close()


def _endpoint(url: str, name: str = "hook") -> WebhookEndpoint:
    return WebhookEndpoint("team-a", name, url, SECRET, frozenset({"job.phase"}), "rljob")


def _log_phases(store: SqlJobStore, phases: list[JobPhase], job_id: str = "rl-webhook00001") -> list[int]:
    """A job of team-a whose event log has these phase entries; their seqs."""
    now = datetime.now(UTC)
    record = JobRecord(
        id=job_id, team="team-a", name="hooked", spec=record_spec(), spec_hash="h", phase=phases[-1], created_at=now, updated_at=now
    )
    with store.transaction() as tx:
        tx.insert(record)
        previous = None
        seqs = []
        for phase in phases:
            seqs.append(tx.append_event(record, "phase", {"phase": phase.value, "previous": previous, "message": ""}, now))
            previous = phase.value
    return seqs


def _dispatcher(store: SqlJobStore, endpoints: list[WebhookEndpoint], **kw: object) -> WebhookDispatcher:
    options: dict[str, object] = {"policy": FAST, "clock": utc_now, "enqueue_interval_s": 0.05, **kw}
    queue = options.pop("queue", SqlWebhookQueue(store.engine))
    transport = options.pop("transport", HttpWebhookTransport())
    return WebhookDispatcher(store, queue, transport, endpoints, **options)  # type: ignore[arg-type]


def _deliveries(store: SqlJobStore) -> list[WebhookDeliveryPublic]:
    return SqlWebhookQueue(store.engine).deliveries("team-a", None, 100).data


@contextmanager
def running(dispatcher: WebhookDispatcher) -> Iterator[WebhookDispatcher]:
    loops = RoundLoops(dispatcher.rounds())  # as the leader's supervisor runs them
    loops.start()
    try:
        yield dispatcher
    finally:
        loops.stop()


def test_a_delivery_answered_500_twice_is_retried_and_delivered_once_signed(sqlite_store: SqlJobStore) -> None:
    with serving(Receiver([500, 500])) as receiver:
        dispatcher = _dispatcher(sqlite_store, [_endpoint(receiver.url)])
        dispatcher.queue.cursor()  # webhooks start from now: what is logged from here on is sent
        (seq,) = _log_phases(sqlite_store, [JobPhase.QUEUED])
        with running(dispatcher):
            wait_until(lambda: [d.state for d in _deliveries(sqlite_store)] == [DeliveryState.DELIVERED])
        (delivery,) = _deliveries(sqlite_store)
        assert (delivery.attempts, delivery.last_status, delivery.seq) == (3, 200, seq)
        assert receiver.ids() == [delivery.id] * 3  # every attempt: the same id
        assert len({r.body for r in receiver.received}) == 1  # ... and the same bytes
        for request in receiver.received:  # each attempt signed afresh, and the receiver's check passes
            assert verify(SECRET, request.headers["x-rljob-signature"], request.body, now=time.time())
            assert not verify(b"another secret", request.headers["x-rljob-signature"], request.body, now=time.time())
            assert not verify(SECRET, request.headers["x-rljob-signature"], request.body + b" ", now=time.time())
            assert not verify(SECRET, request.headers["x-rljob-signature"], request.body, now=time.time() + 3600)  # a replay
        body = receiver.received[0].json
        assert (body["id"], body["type"], body["seq"], body["data"]["phase"]) == (delivery.id, "job.phase", seq, "QUEUED")


def test_a_receiver_that_never_answers_is_timed_out_retried_and_failed_after_the_bound(sqlite_store: SqlJobStore) -> None:
    with silent() as dead, serving(Receiver()) as alive:
        policy = dataclasses.replace(FAST, read_timeout_s=0.2)
        dispatcher = _dispatcher(sqlite_store, [_endpoint(dead.url, "dead"), _endpoint(alive.url, "alive")], policy=policy)
        dispatcher.queue.cursor()
        _log_phases(sqlite_store, [JobPhase.QUEUED])
        with running(dispatcher):
            wait_until(lambda: {d.endpoint: d.state for d in _deliveries(sqlite_store)}.get("dead") == DeliveryState.FAILED)
        by_endpoint = {d.endpoint: d for d in _deliveries(sqlite_store)}
        failed = by_endpoint["dead"]
        assert failed.attempts == FAST.max_attempts == dead.connections  # each attempt a connection, then given up
        assert failed.last_status is None and "did not answer in time" in (failed.last_error or "")
        assert f"gave up after {FAST.max_attempts} attempts" in (failed.last_error or "")
        assert by_endpoint["alive"].state == DeliveryState.DELIVERED and len(alive.received) == 1  # its own thread


def test_a_redirect_is_not_followed_and_fails_the_delivery(sqlite_store: SqlJobStore) -> None:
    with serving(Receiver()) as elsewhere, serving(Receiver([302])) as redirecting:
        redirecting.location = elsewhere.url
        dispatcher = _dispatcher(sqlite_store, [_endpoint(redirecting.url)])
        dispatcher.queue.cursor()
        _log_phases(sqlite_store, [JobPhase.QUEUED])
        with running(dispatcher):
            wait_until(lambda: [d.state for d in _deliveries(sqlite_store)] == [DeliveryState.FAILED])
        (delivery,) = _deliveries(sqlite_store)
        assert (delivery.attempts, delivery.last_status) == (1, 302) and "never followed" in (delivery.last_error or "")
        assert len(redirecting.received) == 1 and elsewhere.received == []


class DiesMidAttempt(HttpWebhookTransport):
    """A leader that dies mid-attempt: its request reaches the receiver, and it never records what came back."""

    def __init__(self) -> None:
        super().__init__()
        self.dead = threading.Event()

    def post(self, url: str, body: bytes, headers: dict[str, str], *, connect_timeout_s: float, read_timeout_s: float) -> SendResult:
        result = super().post(url, body, headers, connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s)
        self.dead.wait(60)
        return result


class CursorReadBefore(SqlWebhookQueue):
    """A second leader for a moment (deposed, not yet aware) that read the cursor before the first moved it."""

    def __init__(self, store: SqlJobStore, seen: int) -> None:
        super().__init__(store.engine)
        self.seen: int | None = seen

    def cursor(self) -> int:
        if self.seen is not None:
            seen, self.seen = self.seen, None
            return seen
        return super().cursor()


def test_a_leader_failover_redelivers_under_the_same_id_and_queues_each_event_once(db_url: str) -> None:
    """Two instances on one database. Both queue the same log entries (for a moment both lead): one row each. A sends
    the first delivery and dies before recording it; B, the new leader, sends it again when A's lease ends, under
    the same id with the same body, then the rest. The receiver, deduplicating on the id, sees each event once."""
    first, second = SqlJobStore(db_url), SqlJobStore(db_url)
    first.migrate()
    with serving(Receiver()) as receiver:
        endpoint = _endpoint(receiver.url)
        quick = dataclasses.replace(FAST, connect_timeout_s=0.2, read_timeout_s=0.2, lease_margin_s=0.2)  # A's lease: 0.6 s
        a = _dispatcher(first, [endpoint], transport=(dying := DiesMidAttempt()), policy=quick)
        start = a.queue.cursor()
        seqs = _log_phases(first, [JobPhase.QUEUED, JobPhase.LAUNCHING, JobPhase.RUNNING])
        b = _dispatcher(second, [endpoint], queue=CursorReadBefore(second, start), policy=quick)
        assert a.enqueue_once() == 3
        assert b.enqueue_once() == 3  # B queued the same three: the store kept one of each
        with first.engine.connect() as conn:
            rows = conn.execute(select(WebhookDeliveryRow.event_seq, func.count()).group_by(WebhookDeliveryRow.event_seq)).all()
        assert sorted(rows) == [(seq, 1) for seq in seqs]
        try:
            with running(a):
                wait_until(lambda: len(receiver.received) == 1)  # A's first attempt arrived; A never records it
                with running(b):
                    wait_until(lambda: [d.state for d in _deliveries(second)] == [DeliveryState.DELIVERED] * 3)
                dying.dead.set()
        finally:
            dying.dead.set()
            first.close()
            second.close()
    ids = receiver.ids()
    assert ids[0] == ids[1] and receiver.received[0].body == receiver.received[1].body  # sent twice: one id, one body
    unique = list(dict.fromkeys(ids))
    assert len(ids) == 4 and len(unique) == 3
    deduplicated = {r.delivery: r.json for r in receiver.received}
    assert [deduplicated[i]["seq"] for i in unique] == seqs  # each event once, in order


class SenderDied(Exception):
    pass


class Posts:
    """A sender's transport that keeps what it was asked to send and answers 200; `during` runs inside the attempt."""

    def __init__(self, during: Callable[[], None] = lambda: None) -> None:
        self.sent: list[str] = []
        self.during = during

    def post(self, url: str, body: bytes, headers: dict[str, str], *, connect_timeout_s: float, read_timeout_s: float) -> SendResult:
        self.sent.append(headers["X-Rljob-Delivery"])
        self.during()
        return SendResult(200)


def test_a_leased_delivery_keeps_a_second_sender_away_until_the_lease_ends(db_url: str) -> None:
    """Two replicas' senders on one database, on one clock the test moves. While A's attempt is under way, B's sender
    finds the delivery leased and sends nothing, up to the last moment of A's lease; once it ends (A died in the
    attempt) B sends it. Without the lease, B sends it at once, beside A: twice while A's attempt is alive."""
    first, second = SqlJobStore(db_url), SqlJobStore(db_url)
    first.migrate()
    now = [datetime.now(UTC)]
    endpoint = _endpoint("http://127.0.0.1:9/never-reached")  # both transports are the test's
    b_posts = Posts()
    b = _dispatcher(second, [endpoint], transport=b_posts, clock=lambda: now[0])
    lease = timedelta(seconds=FAST.lease_s)
    b_saw: list[list[str]] = []

    def race_then_die() -> None:
        started = now[0]
        for at in (started, started + lease - timedelta(milliseconds=1)):  # A's lease holds
            now[0] = at
            b.send_next(endpoint)
            b_saw.append(list(b_posts.sent))
        now[0] = started + lease  # A's lease ends
        b.send_next(endpoint)
        b_saw.append(list(b_posts.sent))
        raise SenderDied

    a_posts = Posts(during=race_then_die)
    a = _dispatcher(first, [endpoint], transport=a_posts, clock=lambda: now[0])
    a.queue.cursor()
    _log_phases(first, [JobPhase.QUEUED])
    try:
        assert a.enqueue_once() == 1
        with pytest.raises(SenderDied):
            a.send_next(endpoint)
        (delivery,) = _deliveries(second)
    finally:
        first.close()
        second.close()
    assert a_posts.sent == [delivery.id]
    assert b_saw == [[], [], [delivery.id]], "B sent the delivery while A's lease held it"
    assert (delivery.state, delivery.attempts) == (DeliveryState.DELIVERED, 1)  # B's attempt: A never recorded its own


def test_of_two_senders_that_read_one_delivery_at_once_only_the_first_to_lease_it_sends(db_url: str) -> None:
    """The race itself: B's sender reads the endpoint's head while it is free; before B leases it, A's sender leases
    it (and is sending). B's lease is a conditional write that finds A's lease, so B sends nothing and A's attempt is
    the only one. Without the lease's condition on that write, B leases it too and both send."""
    first, second = SqlJobStore(db_url), SqlJobStore(db_url)
    first.migrate()
    now = [datetime.now(UTC)]
    endpoint = _endpoint("http://127.0.0.1:9/never-reached")
    a = _dispatcher(first, [endpoint], transport=Posts(), clock=lambda: now[0])
    b_posts = Posts()
    b = _dispatcher(second, [endpoint], transport=b_posts, clock=lambda: now[0])
    a_claims: list[Claim] = []

    def a_leases_first(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("UPDATE WEBHOOK_DELIVERIES") and not a_claims:
            a_claims.append(a.queue.claim(endpoint.team, endpoint.name, now[0], FAST.lease_s))

    a.queue.cursor()
    _log_phases(first, [JobPhase.QUEUED])
    event.listen(second.engine, "before_cursor_execute", a_leases_first)
    try:
        assert a.enqueue_once() == 1
        b.send_next(endpoint)  # reads the head, then A leases it, then B's lease
        (delivery,) = _deliveries(second)
    finally:
        event.remove(second.engine, "before_cursor_execute", a_leases_first)
        first.close()
        second.close()
    assert [c.delivery.id if c.delivery else None for c in a_claims] == [delivery.id]  # A won the lease
    assert b_posts.sent == [], "B sent a delivery A had leased"
    assert (delivery.state, delivery.attempts) == (DeliveryState.PENDING, 0)  # A's attempt under way, B's none
