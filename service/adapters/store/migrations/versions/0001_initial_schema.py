"""initial schema: jobs, their labels, event log and metric points, and API tokens.

Timestamps are naive UTC (tables.UtcDateTime); ids autoincrement (INTEGER on SQLite, BIGINT on PostgreSQL).

Revision ID: 0001
Revises:
Create Date: 2026-11-30 03:47:06.818117
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "job_events",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("time", sa.DateTime(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
    )
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.create_index("ix_job_events_job_seq", ["job_id", "seq"], unique=False)
        batch_op.create_index("ix_job_events_team_seq", ["team", "seq"], unique=False)

    op.create_table(
        "job_metrics",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("time", sa.DateTime(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job_metrics", schema=None) as batch_op:
        batch_op.create_index("ix_job_metrics_job_id", ["job_id", "id"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("failure_reason", sa.String(length=64), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("stage", sa.String(length=16), nullable=True),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("total_steps", sa.Integer(), nullable=True),
        sa.Column("latest_metrics", sa.JSON(), nullable=False),
        sa.Column("stage_times", sa.JSON(), nullable=False),
        sa.Column("artifacts", sa.JSON(), nullable=False),
        sa.Column("run_finished", sa.JSON(), nullable=True),
        sa.Column("backend", sa.String(length=16), nullable=True),
        sa.Column("object_name", sa.String(length=255), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("resumes", sa.Integer(), nullable=False),
        sa.Column("last_trainer_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_event_seq", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("pk"),
        sa.UniqueConstraint("id"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_phase", ["phase"], unique=False)
        batch_op.create_index("ix_jobs_team_idempotency_key", ["team", "idempotency_key"], unique=True)
        batch_op.create_index("ix_jobs_team_pk", ["team", "pk"], unique=False)

    op.create_table(
        "job_labels",
        sa.Column("job_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("key", sa.String(length=63), nullable=False),
        sa.Column("value", sa.String(length=63), nullable=False),
        sa.ForeignKeyConstraint(["job_pk"], ["jobs.pk"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_pk", "key"),
    )
    with op.batch_alter_table("job_labels", schema=None) as batch_op:
        batch_op.create_index("ix_job_labels_key_value", ["key", "value"], unique=False)


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("job_labels", schema=None) as batch_op:
        batch_op.drop_index("ix_job_labels_key_value")

    op.drop_table("job_labels")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_team_pk")
        batch_op.drop_index("ix_jobs_team_idempotency_key")
        batch_op.drop_index("ix_jobs_phase")

    op.drop_table("jobs")
    with op.batch_alter_table("job_metrics", schema=None) as batch_op:
        batch_op.drop_index("ix_job_metrics_job_id")

    op.drop_table("job_metrics")
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.drop_index("ix_job_events_team_seq")
        batch_op.drop_index("ix_job_events_job_seq")

    op.drop_table("job_events")
    op.drop_table("api_tokens")
