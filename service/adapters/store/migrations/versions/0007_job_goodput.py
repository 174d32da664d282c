"""jobs.goodput: where the trainer's train_rl time went, by part, per attempt.

The trainer's newest `goodput` event of each attempt ({"attempts": {"<n>": TrainGoodput JSON}},
trainer/contract/run/goodput.py); JobPublic.goodput adds the phase and stage times to it
(service/domain/cost/goodput.py). Nullable: jobs stored before this revision, and jobs whose trainer has
not finished a training step.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("goodput", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("goodput")
