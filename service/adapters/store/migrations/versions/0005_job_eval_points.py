"""jobs.eval_points: the evaluations a job's trainer reported (before, step-N, after).

One EvalSummary (trainer/contract/run/evaluation.py) per evaluation label, as JSON: counts of correct,
format and partial outcomes, and the paired change from `before`. JobPublic.eval and the learning
verdict are computed from them. Nullable: jobs stored before this revision show no evaluation.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 13:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("eval_points", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("eval_points")
