"""jobs.trainer_events: what a job's trainer events made the service store, and how many a bound refused.

service/domain/records/trainer_event_budget.py TrainerEventCounts as JSON ({stored, stored_bytes, refused}); the fold
of trainer events checks the per-job bounds against it. Nullable: a job stored before this revision reads as
zeros (its history so far is not counted against its bounds, which only makes them looser for old jobs).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("trainer_events", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("trainer_events")
