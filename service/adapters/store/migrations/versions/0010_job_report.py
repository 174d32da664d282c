"""jobs.report: what a job's trainer reported about its run, as one JSON document (service/domain/records/run_report.py).

Folds the fourteen columns that held it (attempt, last_trainer_seq, stage, step, total_steps, latest_metrics,
recent_train_steps, stage_times, artifacts, run_finished, eval_points, storage, goodput, trainer_events) into
`report`, one key each (run_finished becomes `outcome`, goodput's {"attempts": {...}} its inner object), and
drops them: nothing queries them, and a new reported fact then needs no column. Each part keeps the JSON its
column held, so the rows read back into the same RunReport. Plain dict work on the stored JSON, no app code, so
this revision means the same whatever the models become. The downgrade splits the document back into columns.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 09:30:00.000000
"""

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (column, its type as 0001-0009 created it, nullable, the report's key, the value a NULL column meant)
COLUMNS: list[tuple[str, Any, bool, str, Any]] = [
    ("attempt", sa.Integer(), False, "attempt", 0),
    ("last_trainer_seq", sa.BigInteger(), False, "last_trainer_seq", -1),
    ("stage", sa.String(length=16), True, "stage", None),
    ("step", sa.Integer(), True, "step", None),
    ("total_steps", sa.Integer(), True, "total_steps", None),
    ("latest_metrics", sa.JSON(), False, "latest_metrics", {}),
    ("recent_train_steps", sa.JSON(), True, "recent_train_steps", []),
    ("stage_times", sa.JSON(), False, "stage_times", {}),
    ("artifacts", sa.JSON(), False, "artifacts", {}),
    ("run_finished", sa.JSON(), True, "outcome", None),
    ("eval_points", sa.JSON(), True, "eval_points", []),
    ("storage", sa.JSON(), True, "storage", None),
    ("goodput", sa.JSON(), True, "goodput", {}),
    ("trainer_events", sa.JSON(), True, "trainer_events", None),
]


def _json(value: Any) -> Any:
    # SQLite hands JSON columns back as text through a core select on some drivers; PostgreSQL as objects.
    return json.loads(value) if isinstance(value, str) else value


def report_of_columns(row: dict[str, Any]) -> dict[str, Any]:
    report = {}
    for column, type_, _, key, empty in COLUMNS:
        value = _json(row[column]) if isinstance(type_, sa.JSON) else row[column]
        if column == "goodput" and value is not None:
            value = value.get("attempts") or {}
        report[key] = empty if value is None else value
    return report


def columns_of_report(report: dict[str, Any]) -> dict[str, Any]:
    row = {}
    for column, _, nullable, key, empty in COLUMNS:
        value = report.get(key, empty)
        if column == "goodput":
            value = {"attempts": value} if value else None
        elif value is None and not nullable:
            value = empty
        row[column] = value
    return row


def _jobs_table() -> sa.TableClause:
    columns = [sa.column(name, type_) for name, type_, *_ in COLUMNS]
    return sa.table("jobs", sa.column("pk", sa.BigInteger()), sa.column("report", sa.JSON()), *columns)


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("report", sa.JSON(), nullable=True))
    jobs = _jobs_table()
    conn = op.get_bind()
    for row in conn.execute(sa.select(jobs)).mappings().all():
        conn.execute(sa.update(jobs).where(jobs.c.pk == row["pk"]).values(report=report_of_columns(dict(row))))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for name, *_ in COLUMNS:
            batch_op.drop_column(name)


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for name, type_, *_ in COLUMNS:
            batch_op.add_column(sa.Column(name, type_, nullable=True))
    jobs = _jobs_table()
    conn = op.get_bind()
    for row in conn.execute(sa.select(jobs.c.pk, jobs.c.report)).mappings().all():
        conn.execute(sa.update(jobs).where(jobs.c.pk == row["pk"]).values(**columns_of_report(_json(row["report"]) or {})))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for name, type_, nullable, *_ in COLUMNS:
            if not nullable:
                batch_op.alter_column(name, existing_type=type_, nullable=False)
        batch_op.drop_column("report")
