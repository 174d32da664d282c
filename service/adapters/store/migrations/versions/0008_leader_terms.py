"""leader_terms: the leader's term, a number each new leader increments (fencing, service/leadership.py).

One row, name 'leader', starting at term 0. A replica that takes the leader lock takes the next term;
every write it makes as leader checks, in its own transaction, that the term is still its own.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    terms = op.create_table(
        "leader_terms",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("term", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=True),
        sa.Column("taken_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.bulk_insert(terms, [{"name": "leader", "term": 0}])


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("leader_terms")
