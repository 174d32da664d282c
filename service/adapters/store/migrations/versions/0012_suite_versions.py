"""suite_versions: a version number per suite content hash, in order of first appearance.

An eval job's trainer hashes the suite it actually loaded (SuiteIdentity.content_hash); the service numbers each
new hash of a suite name within its scope ("builtin" for the built-in suites, else the team), so results can name
"arith-b v2 (hash ...)" and evaluations on different versions are never compared. Both uniqueness constraints
are what keep two concurrent first appearances of one hash from taking two numbers (suite_version_rows.py).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 14:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "suite_versions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("scope", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("content_hash", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(), nullable=False),
        sa.Column("first_job_id", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("scope", "name", "content_hash", name="uq_suite_versions_hash"),
        sa.UniqueConstraint("scope", "name", "version", name="uq_suite_versions_version"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("suite_versions")
