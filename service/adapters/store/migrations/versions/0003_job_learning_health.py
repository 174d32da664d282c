"""jobs.recent_train_steps and jobs.health_verdict: what a job's learning-health verdict is judged on.

recent_train_steps holds the last train steps (service/domain/health/learning_health.py, at most
HEALTH_WINDOW_STEPS entries of step, time, signal fraction, loss, KL, non-finite names) so the
verdict survives a service restart; health_verdict is the verdict last logged as a `health` event.
Both nullable: jobs stored before this revision have no steps recorded and no verdict, and show
none until they report a new train step.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-15 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("recent_train_steps", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("health_verdict", sa.String(length=16), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("health_verdict")
        batch_op.drop_column("recent_train_steps")
