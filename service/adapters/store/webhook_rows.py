"""The webhook delivery queue in the database (tables.WebhookDeliveryRow, WebhookCursorRow; migration 0014): the
WebhookQueue port of service/domain/webhooks/webhook_models.py, on the job store's engine.

Two leaders for a moment (a deposed one that has not noticed) may both queue one entry: INSERT ... ON CONFLICT DO
NOTHING on (team, endpoint, event_seq) keeps one row, without raising or aborting the transaction, on SQLite and
PostgreSQL alike. A claim is a conditional UPDATE (pending, not leased, not changed since it was read): of two
senders, one wins it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import CursorResult, Engine

from service.domain.records.models import JobEvent
from service.domain.webhooks.webhook_models import (
    Claim,
    DeliveryState,
    NewDelivery,
    Outcome,
    PendingDelivery,
    WebhookDeliveriesPublic,
    WebhookDeliveryPublic,
)

from .tables import JobEventRow, WebhookCursorRow, WebhookDeliveryRow

CURSOR = "webhooks"
_D = cast(Table, WebhookDeliveryRow.__table__)
_C = cast(Table, WebhookCursorRow.__table__)
_E = cast(Table, JobEventRow.__table__)
MAX_ERROR_CHARS = 500


class SqlWebhookQueue:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

    def cursor(self) -> int:
        with self.engine.begin() as conn:
            seq = conn.execute(select(_C.c.seq).where(_C.c.name == CURSOR)).scalar_one_or_none()
            if seq is not None:
                return int(seq)
            newest = int(conn.execute(select(func.coalesce(func.max(_E.c.seq), 0))).scalar_one())
            conn.execute(self._insert(_C).values(name=CURSOR, seq=newest).on_conflict_do_nothing())
            return int(conn.execute(select(_C.c.seq).where(_C.c.name == CURSOR)).scalar_one())

    def new_events(self, after_seq: int, kinds: frozenset[str], limit: int) -> tuple[list[JobEvent], int]:
        # The page's narrow columns first (a trainer logs thousands of progress entries, whose data is not needed),
        # then the data of the few entries that may be sent.
        page = select(_E.c.seq, _E.c.kind).where(_E.c.seq > after_seq).order_by(_E.c.seq).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(page).all()
            if not rows:
                return [], after_seq
            wanted = [seq for seq, kind in rows if kind in kinds]
            events = []
            if wanted:
                full = select(_E).where(_E.c.seq.in_(wanted)).order_by(_E.c.seq)
                events = [
                    JobEvent(seq=r.seq, job_id=r.job_id, team=r.team, kind=r.kind, time=r.time, data=r.data) for r in conn.execute(full)
                ]
        return events, int(rows[-1][0])

    def enqueue(self, deliveries: list[NewDelivery], *, cursor: int, max_pending: int) -> None:
        with self.engine.begin() as conn:
            pending: dict[tuple[str, str], int] = {}
            for d in deliveries:
                key = (d.team, d.endpoint)
                if key not in pending:
                    of_endpoint = (_D.c.team == d.team) & (_D.c.endpoint == d.endpoint)
                    count = select(func.count()).where(of_endpoint, _D.c.state == DeliveryState.PENDING)
                    pending[key] = int(conn.execute(count).scalar_one())
                full = pending[key] >= max_pending
                refused = f"not sent: {max_pending} deliveries to this endpoint were already pending (queue full)"
                row: dict[str, Any] = {
                    "id": d.id,
                    "team": d.team,
                    "endpoint": d.endpoint,
                    "event_seq": d.seq,
                    "event": d.event,
                    "job_id": d.job_id,
                    "body": d.body,
                    "state": DeliveryState.FAILED if full else DeliveryState.PENDING,
                    "attempts": 0,
                    "created_at": d.created_at,
                    "next_attempt_at": None if full else d.created_at,
                    "last_error": refused if full else None,
                }
                inserted = conn.execute(self._insert(_D).values(**row).on_conflict_do_nothing())
                if not full and isinstance(inserted, CursorResult) and inserted.rowcount:
                    pending[key] += 1
            moved = update(_C).where(_C.c.name == CURSOR, _C.c.seq < cursor).values(seq=cursor)  # only forward
            conn.execute(moved)

    def claim(self, team: str, endpoint: str, now: datetime, lease_s: float) -> Claim:
        """The endpoint's oldest pending delivery, leased until now + lease_s; deliveries go in event order, so a later
        one waits for the head to be delivered or failed."""
        head = (
            select(_D.c.id, _D.c.event_seq, _D.c.event, _D.c.body, _D.c.attempts, _D.c.next_attempt_at, _D.c.lease_until)
            .where(_D.c.team == team, _D.c.endpoint == endpoint, _D.c.state == DeliveryState.PENDING)
            .order_by(_D.c.event_seq)
            .limit(1)
        )
        with self.engine.begin() as conn:
            row = conn.execute(head).one_or_none()
            if row is None:
                return Claim()
            due = max(row.next_attempt_at or now, row.lease_until or now)
            if due > now:
                return Claim(wait_s=(due - now).total_seconds())
            taken = conn.execute(
                update(_D)
                .where(
                    _D.c.id == row.id,
                    _D.c.state == DeliveryState.PENDING,
                    _D.c.attempts == row.attempts,
                    (_D.c.lease_until.is_(None)) | (_D.c.lease_until <= now),
                )
                .values(lease_until=now + timedelta(seconds=lease_s))
            )
            if not isinstance(taken, CursorResult) or taken.rowcount != 1:
                return Claim(wait_s=0.0)  # another sender took it: look again
        return Claim(PendingDelivery(row.id, team, endpoint, row.event_seq, row.event, row.body, row.attempts))

    def finish(self, delivery_id: str, outcome: Outcome) -> None:
        """Record an attempt. Only a pending delivery changes: one already delivered (by another replica) stays so."""
        values: dict[str, Any] = {
            "state": outcome.state,
            "attempts": outcome.attempts,
            "next_attempt_at": outcome.next_attempt_at,
            "lease_until": None,
            "last_status": outcome.status,
            "last_error": None if outcome.error is None else outcome.error[:MAX_ERROR_CHARS],
        }
        if outcome.state is DeliveryState.DELIVERED:
            values["delivered_at"] = outcome.at
        with self.engine.begin() as conn:
            conn.execute(update(_D).where(_D.c.id == delivery_id, _D.c.state == DeliveryState.PENDING).values(**values))

    def deliveries(self, team: str | None, state: DeliveryState | None, limit: int) -> WebhookDeliveriesPublic:
        """The newest `limit` deliveries (of one team, in one state), and how many of them are pending and failed."""
        stmt = select(_D).order_by(_D.c.created_at.desc(), _D.c.event_seq.desc()).limit(limit)
        counts = select(_D.c.state, func.count()).group_by(_D.c.state)
        if team is not None:
            stmt, counts = stmt.where(_D.c.team == team), counts.where(_D.c.team == team)
        if state is not None:
            stmt = stmt.where(_D.c.state == state)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
            by_state = {s: int(n) for s, n in conn.execute(counts)}
        data = [
            WebhookDeliveryPublic(
                id=r.id,
                team=r.team,
                endpoint=r.endpoint,
                event=r.event,
                seq=r.event_seq,
                job_id=r.job_id,
                state=DeliveryState(r.state),
                attempts=r.attempts,
                created_at=r.created_at,
                next_attempt_at=r.next_attempt_at if r.state == DeliveryState.PENDING else None,
                delivered_at=r.delivered_at,
                last_status=r.last_status,
                last_error=r.last_error,
            )
            for r in rows
        ]
        return WebhookDeliveriesPublic(
            data=data, count=len(data), pending=by_state.get(DeliveryState.PENDING, 0), failed=by_state.get(DeliveryState.FAILED, 0)
        )
