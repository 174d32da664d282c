"""jobs.estimate, jobs.hold, jobs.checkpoint_expiry: what a job was expected to take, why the service holds it,
and which of its checkpoints the retention policy deleted.

- estimate (service/domain/records/estimate_models.py): the submit-time estimate (wait, run time split like goodput,
  chip-hours, dollars, storage), kept so the job's view shows it beside the actuals when it ends.
- hold (service/domain/records/budget_models.py): the service, not the backend, holds the job: its team's monthly budget
  is spent. Set while the workload is being stopped (it checkpoints, as on a preemption) and while the job waits
  QUEUED for budget; cleared when it is released.
- checkpoint_expiry (service/domain/records/checkpoint_expiry_models.py): the retention pass's record for a finished run,
  the checkpoints it planned to delete and those it has deleted, so a pass killed midway is finished by the next.

All nullable: a job stored before this revision has none of them, which is what each means.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 16:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("estimate", "hold", "checkpoint_expiry")


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for name in _COLUMNS:
            batch_op.add_column(sa.Column(name, sa.JSON(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for name in reversed(_COLUMNS):
            batch_op.drop_column(name)
