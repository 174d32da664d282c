"""jobs.storage: the bytes a job's run directory holds, total and by part, as its trainer measured them.

The trainer's newest `storage` event (trainer/contract/run/storage.py RunStorage as JSON); JobPublic.storage
shows it. Nullable: jobs stored before this revision, and jobs whose trainer has not finished a stage.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("storage", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("storage")
