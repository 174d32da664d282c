"""jobs.queue, jobs.phase_seconds, jobs.phase_entered_at, jobs.fit_estimate: a shared TPU pool.

queue: while a job is QUEUED behind a backend's queue (a Kueue LocalQueue, the local launcher's team
quota), which queue, why, and its place in line. phase_seconds and phase_entered_at: the time spent
in each phase so far and when the current one began, which chip-hours are computed from.
fit_estimate: the per-chip memory estimate made at submit. All nullable: jobs stored before this
revision have no queue, no counted phase time before their next phase change, and no estimate.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 20:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("queue", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("phase_seconds", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("phase_entered_at", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("fit_estimate", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("fit_estimate")
        batch_op.drop_column("phase_entered_at")
        batch_op.drop_column("phase_seconds")
        batch_op.drop_column("queue")
