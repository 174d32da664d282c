"""The leader's webhook work: queue a delivery for each event log entry an endpoint takes, and deliver them.

Rounds (service/leader_rounds.py: run by the leader's supervisor while this replica leads, stopped when it does not):
- rljob-webhooks: reads the job event log after the stored cursor (webhooks.py says which entries are sent) and
  stores one delivery per (endpoint, entry), moving the cursor in the same write: a killed leader's successor
  goes on from where it stopped, and a delivery queued twice (two leaders for a moment) is one row;
- rljob-webhook-send-<n>, one per endpoint: sends that endpoint's oldest pending delivery (in event order), signed
  at each attempt, and records what came of it. A failure is retried with exponential backoff and jitter up to
  max_attempts, then the delivery is failed. A receiver that never answers, or trickles its answer, holds only its
  own endpoint's thread, and for one attempt's deadline at most (the connect and read timeouts together, from the
  attempt's start: adapters/webhook_sender.py); every other endpoint, team and request goes on.

At least once: a delivery is leased while it is being sent (so two replicas do not both send it), and one whose
sender died mid-attempt is sent again when its lease ends, with the same id and body: receivers deduplicate on
X-Rljob-Delivery. Each endpoint's pending deliveries are bounded (a dead receiver does not fill the database):
beyond the bound a new one is stored failed ("queue full") and the admin sees it.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.domain.records.models import JobEvent, JobRecord
from service.domain.records.ports import Clock, JobStore
from service.leader_rounds import LeaderRound, RoundOf

from .webhook_models import (
    DeliveryState,
    NewDelivery,
    Outcome,
    PendingDelivery,
    SendResult,
    WebhookEndpoint,
    WebhookQueue,
    WebhookTransport,
)
from .webhooks import LOGGED_KINDS, build_body, delivery_id, notice_for, signed_headers

log = logging.getLogger(__name__)

MAX_EVENT_AGE = timedelta(days=1)  # an entry older than this when first read is not sent (webhooks were off then)
PAGES_PER_ROUND = 20  # event log pages one queueing round reads before it lets the loop breathe
RETRYABLE_STATUSES = frozenset({408, 425, 429})  # besides 5xx: the receiver asks to be tried again


@dataclass(frozen=True)
class DeliveryPolicy:
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    max_attempts: int = 8  # with the defaults below: the last attempt about 4 minutes after the first
    retry_base_s: float = 2.0  # the wait after the first failure; doubled after each, with jitter (x0.5 to x1)
    retry_max_s: float = 300.0
    max_pending_per_endpoint: int = 1000
    idle_check_s: float = 5.0  # a sender with nothing due looks again after this (a new delivery wakes it sooner)
    scan_limit: int = 1000  # event log entries read per page
    lease_margin_s: float = 30.0  # a lease outlasts an attempt's deadline by this: only a dead sender's lease expires

    @property
    def lease_s(self) -> float:
        return self.connect_timeout_s + self.read_timeout_s + self.lease_margin_s


def retry_delay_s(attempts: int, policy: DeliveryPolicy, draw: float) -> float:
    """The wait after the `attempts`-th failed attempt: base x 2^(attempts-1), capped, times a jitter in [0.5, 1)."""
    return float(min(policy.retry_max_s, policy.retry_base_s * 2.0 ** (attempts - 1)) * (0.5 + 0.5 * draw))


def outcome_of(delivery: PendingDelivery, result: SendResult, now: datetime, policy: DeliveryPolicy, draw: float) -> Outcome:
    """What one attempt's result makes of the delivery: delivered, retried later, or failed for good."""
    attempts = delivery.attempts + 1
    status = result.status
    if status is not None and 200 <= status < 300:
        return Outcome(DeliveryState.DELIVERED, attempts, None, status, None, now)
    if status is not None and 300 <= status < 400:
        error = f"answered {status}, a redirect, which is never followed: configure the URL it redirects to"
        return Outcome(DeliveryState.FAILED, attempts, None, status, error, now)
    if status is not None and status < 500 and status not in RETRYABLE_STATUSES:
        error = f"answered {status}; not retried (the receiver refuses it: check its URL and secret)"
        return Outcome(DeliveryState.FAILED, attempts, None, status, error, now)
    why = result.error or f"answered {status}"
    if attempts >= policy.max_attempts:
        return Outcome(DeliveryState.FAILED, attempts, None, status, f"{why}; gave up after {attempts} attempts", now)
    retry_at = now + timedelta(seconds=retry_delay_s(attempts, policy, draw))
    return Outcome(DeliveryState.PENDING, attempts, retry_at, status, why, now)


class WebhookDispatcher:
    def __init__(
        self,
        store: JobStore,
        queue: WebhookQueue,
        transport: WebhookTransport,
        endpoints: list[WebhookEndpoint],
        *,
        policy: DeliveryPolicy,
        clock: Clock,
        enqueue_interval_s: float,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.queue = queue
        self.transport = transport
        self.endpoints = endpoints
        self.policy = policy
        self.clock = clock
        self.enqueue_interval_s = enqueue_interval_s
        self._draw = draw
        # Set when a delivery is queued for an endpoint: its sender's round runs at once, not at its idle interval.
        self._due = {endpoint.key: threading.Event() for endpoint in endpoints}

    def rounds(self) -> list[LeaderRound]:
        """The leader's webhook rounds: the queueing round, then one sending round per endpoint."""
        enqueue = RoundOf("rljob-webhooks", "queueing webhooks", self.enqueue_interval_s, self._enqueue_round, on_restart=self._read_cursor)
        # A sender in the middle of an attempt ends within its timeouts.
        attempt_s = self.policy.connect_timeout_s + self.policy.read_timeout_s + 5
        senders = [
            RoundOf(
                f"rljob-webhook-send-{n}",
                f"delivering webhooks to {endpoint.key}",
                self.policy.idle_check_s,
                functools.partial(self.send_next, endpoint),
                wake=self._due[endpoint.key],
                stop_timeout_s=attempt_s,
            )
            for n, endpoint in enumerate(self.endpoints)
        ]
        return [enqueue, *senders]

    def _read_cursor(self) -> None:
        try:  # at the term's start, not in the loop's first round: what is logged once this replica leads is sent
            self.queue.cursor()
        except Exception:  # the database is away: the loop's first round reads it again
            log.exception("reading the webhook cursor failed; the webhook loop tries again")

    def _enqueue_round(self) -> float | None:
        self.enqueue_once()
        return None

    def enqueue_once(self) -> int:
        """Queue deliveries for the event log entries after the cursor; the number queued."""
        cursor = self.queue.cursor()
        queued = 0
        woken: set[str] = set()
        for _ in range(PAGES_PER_ROUND):
            events, last = self.queue.new_events(cursor, LOGGED_KINDS, self.policy.scan_limit)
            if last <= cursor:
                break
            new = self._deliveries_for(events)
            self.queue.enqueue(new, cursor=last, max_pending=self.policy.max_pending_per_endpoint)
            cursor, queued = last, queued + len(new)
            woken.update(f"{d.team}/{d.endpoint}" for d in new)
        for key in woken:
            if (due := self._due.get(key)) is not None:
                due.set()
        return queued

    def _deliveries_for(self, events: list[JobEvent]) -> list[NewDelivery]:
        now = self.clock()
        records: dict[str, JobRecord | None] = {}
        new: list[NewDelivery] = []
        for event in events:
            if now - event.time > MAX_EVENT_AGE:
                continue
            endpoints = [e for e in self.endpoints if e.team == event.team]
            if not endpoints:
                continue
            if event.job_id not in records:
                records[event.job_id] = self.store.get(event.job_id)
            record = records[event.job_id]
            if record is None:
                continue
            for endpoint in endpoints:
                found = notice_for(event, record, endpoint.events)
                if found is None:
                    continue
                webhook_event, notice = found
                did = delivery_id(endpoint.team, endpoint.name, event.seq)
                body = build_body(endpoint.format, delivery=did, webhook_event=webhook_event, event=event, record=record, notice=notice)
                new.append(NewDelivery(did, endpoint.team, endpoint.name, event.seq, webhook_event, record.id, body.decode(), now))
        return new

    def send_next(self, endpoint: WebhookEndpoint) -> float | None:
        """Send the endpoint's oldest due delivery; the seconds until the next round (None: the idle interval)."""
        claim = self.queue.claim(endpoint.team, endpoint.name, self.clock(), self.policy.lease_s)
        delivery = claim.delivery
        if delivery is None:
            return None if claim.wait_s is None else min(claim.wait_s, self.policy.idle_check_s)
        body = delivery.body.encode()
        headers = signed_headers(delivery=delivery.id, webhook_event=delivery.event, body=body, secret=endpoint.secret, now=self.clock())
        result = self.transport.post(
            endpoint.url, body, headers, connect_timeout_s=self.policy.connect_timeout_s, read_timeout_s=self.policy.read_timeout_s
        )
        outcome = outcome_of(delivery, result, self.clock(), self.policy, self._draw())
        self.queue.finish(delivery.id, outcome)
        if outcome.state is not DeliveryState.DELIVERED:  # the endpoint's name and host only: its URL may be a secret
            log.warning(
                "webhook %s to %s (%s), attempt %d: %s (%s)",
                delivery.id,
                endpoint.key,
                endpoint.host,
                outcome.attempts,
                outcome.error,
                outcome.state.value,
            )
        return 0.0
