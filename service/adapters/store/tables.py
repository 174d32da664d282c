"""SQLAlchemy 2 table definitions. The schema itself is created only by Alembic migrations
(migrations/versions); a test checks that these models and the migrations agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, ForeignKey, Index, Integer, String, Text, TypeDecorator, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UtcDateTime(TypeDecorator[datetime]):
    """Stores naive UTC, returns aware UTC: SQLite has no time zones, PostgreSQL's timestamptz
    would otherwise return the server's zone. One representation on both keeps ordering exact."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use an aware UTC datetime")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


# BIGINT on PostgreSQL, INTEGER (the rowid alias that autoincrements) on SQLite.
BigIntPk = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"

    pk: Mapped[int] = mapped_column(BigIntPk, primary_key=True, autoincrement=True)  # list order and cursor
    id: Mapped[str] = mapped_column(String(32), unique=True)
    team: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(63))
    submitted_by: Mapped[str | None] = mapped_column(String(255))  # migration 0002
    phase: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    spec_hash: Mapped[str] = mapped_column(String(64))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    message: Mapped[str] = mapped_column(Text, default="")
    failure_reason: Mapped[str | None] = mapped_column(String(64))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    health_verdict: Mapped[str | None] = mapped_column(String(16))  # migration 0003
    backend: Mapped[str | None] = mapped_column(String(16))
    object_name: Mapped[str | None] = mapped_column(String(255))
    resumes: Mapped[int] = mapped_column(Integer, default=0)
    last_event_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    queue: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # migration 0004
    phase_seconds: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # migration 0004
    phase_entered_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # migration 0004
    fit_estimate: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # migration 0004
    # What the trainer reported (service/domain/records/run_report.py), one document: migration 0010 folded 14 columns in.
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # migration 0011: the kind of capacity it was admitted into
    estimate: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # migration 0013: the submit-time estimate
    hold: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # migration 0013: why the service holds the job (budget)
    checkpoint_expiry: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # migration 0013: the retention pass's record

    __table_args__ = (
        # One job per (team, Idempotency-Key); NULL keys do not collide on either database.
        Index("ix_jobs_team_idempotency_key", "team", "idempotency_key", unique=True),
        Index("ix_jobs_team_pk", "team", "pk"),
        Index("ix_jobs_phase", "phase"),
    )


class JobLabelRow(Base):
    """Labels in their own table so `?label=k=v` filters the same way on SQLite and PostgreSQL."""

    __tablename__ = "job_labels"

    job_pk: Mapped[int] = mapped_column(BigIntPk, ForeignKey("jobs.pk", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[str] = mapped_column(String(63))

    __table_args__ = (Index("ix_job_labels_key_value", "key", "value"),)


class JobEventRow(Base):
    """The per-job event log that SSE replays; `seq` is global, so one cursor serves all streams."""

    __tablename__ = "job_events"

    seq: Mapped[int] = mapped_column(BigIntPk, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(32))
    team: Mapped[str] = mapped_column(String(63))
    kind: Mapped[str] = mapped_column(String(32))
    time: Mapped[datetime] = mapped_column(UtcDateTime)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (Index("ix_job_events_job_seq", "job_id", "seq"), Index("ix_job_events_team_seq", "team", "seq"))


class MetricPointRow(Base):
    __tablename__ = "job_metrics"

    id: Mapped[int] = mapped_column(BigIntPk, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(8))
    step: Mapped[int] = mapped_column(Integer)
    time: Mapped[datetime] = mapped_column(UtcDateTime)
    values: Mapped[dict[str, float]] = mapped_column(JSON)

    __table_args__ = (Index("ix_job_metrics_job_id", "job_id", "id"),)


class TokenRow(Base):
    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    team: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(255), default="")
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class LeaderTermRow(Base):
    """The leader's term: a number that only grows, taken by each replica that becomes leader (one row,
    name 'leader'). Every write a leader makes for its term checks it in the same transaction
    (leader_terms.py), so a deposed leader that has not noticed yet cannot write."""

    __tablename__ = "leader_terms"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    term: Mapped[int] = mapped_column(BigInteger, default=0)
    holder: Mapped[str | None] = mapped_column(String(255))
    taken_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class SuiteVersionRow(Base):
    """Suite versions (migration 0012): the n-th content hash of a suite name in a scope ("builtin", or the team of a
    user suite) seen in an eval job's report is version n (suite_version_rows.py assigns them, the domain's
    suite_versions.py says when)."""

    __tablename__ = "suite_versions"

    id: Mapped[int] = mapped_column(BigIntPk, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(63))
    content_hash: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer)
    first_seen_at: Mapped[datetime] = mapped_column(UtcDateTime)
    first_job_id: Mapped[str] = mapped_column(String(32))

    __table_args__ = (
        UniqueConstraint("scope", "name", "content_hash", name="uq_suite_versions_hash"),
        UniqueConstraint("scope", "name", "version", name="uq_suite_versions_version"),
    )


class WebhookDeliveryRow(Base):
    """A webhook delivery (migration 0014): one per (endpoint, event log entry), its body stored so that every attempt,
    by any replica, sends the same bytes under the same id (service/domain/webhooks/webhook_dispatch.py)."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # webhooks.delivery_id: stable per (endpoint, seq)
    team: Mapped[str] = mapped_column(String(63))
    endpoint: Mapped[str] = mapped_column(String(63))
    event_seq: Mapped[int] = mapped_column(BigInteger)
    event: Mapped[str] = mapped_column(String(32))
    job_id: Mapped[str] = mapped_column(String(32))
    body: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(500))

    __table_args__ = (
        UniqueConstraint("team", "endpoint", "event_seq", name="uq_webhook_deliveries_endpoint_seq"),
        Index("ix_webhook_deliveries_endpoint_state_seq", "team", "endpoint", "state", "event_seq"),
    )


class WebhookCursorRow(Base):
    """How far the webhook dispatcher has read the job event log (one row, name 'webhooks'; migration 0014)."""

    __tablename__ = "webhook_cursors"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
