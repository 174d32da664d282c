"""webhook_deliveries and webhook_cursors: the webhook dispatcher's queue and its place in the job event log.

One delivery per (endpoint, event seq) (the unique constraint is what keeps two leaders for a moment from queueing
one entry twice); the body is stored so each attempt sends the same bytes. The cursor row says how far the event
log has been read, moved in the same transaction as the deliveries it queued.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-10 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("endpoint", sa.String(length=63), nullable=False),
        sa.Column("event_seq", sa.BigInteger(), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("team", "endpoint", "event_seq", name="uq_webhook_deliveries_endpoint_seq"),
    )
    op.create_index("ix_webhook_deliveries_endpoint_state_seq", "webhook_deliveries", ["team", "endpoint", "state", "event_seq"])
    op.create_table(
        "webhook_cursors",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("webhook_cursors")
    op.drop_index("ix_webhook_deliveries_endpoint_state_seq", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
