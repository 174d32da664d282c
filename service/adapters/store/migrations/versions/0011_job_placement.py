"""jobs.placement: the kind of capacity (and Kueue flavor) a job was admitted into, with its billed seconds per kind.

A spec may now name an ordered set of capacities (`hardware.capacity: [spot, on-demand]`); which one runs the job
is the pool's choice, seen by the launcher at admission, and the job's status, labels, price and cost follow it
(service/domain/cost/placement.py). Nullable: a job stored before this revision has none until its next admission is
seen, and its billed time is priced at its spec's (single) kind, as before.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("placement", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("placement")
