"""Suite versions in the database (tables.SuiteVersionRow, migration 0012): get a content's number, or take the next.

Two transactions can see one new content at once (two replicas, or two eval jobs of one new suite folded on one
database). Each inserts "max + 1" with ON CONFLICT DO NOTHING, which neither raises nor aborts the transaction:
on PostgreSQL the second insert waits for the first transaction and then inserts nothing, and a read after it
(READ COMMITTED: a new snapshot per statement) finds the first one's row, whose number it answers. When the
number was taken by another content instead, the next number is tried. SQLite has one writer at a time (and one
service per file), so its insert never meets an uncommitted rival; the same statement serves both.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.domain.records.errors import StoreUnavailable
from service.domain.records.eval_models import SuiteKey, SuiteVersion

from .tables import SuiteVersionRow

MAX_ATTEMPTS = 20  # each lost race means another content took the number: as many as contents appearing at once


def _found(session: Session, key: SuiteKey) -> int | None:
    stmt = select(SuiteVersionRow.version).where(
        SuiteVersionRow.scope == key.scope, SuiteVersionRow.name == key.name, SuiteVersionRow.content_hash == key.content_hash
    )
    version = session.execute(stmt).scalar_one_or_none()
    return None if version is None else int(version)


def suite_version(session: Session, key: SuiteKey, *, job_id: str, now: datetime) -> int:
    """The content's version number, assigned now (first seen in `job_id`) if it has none."""
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    for _ in range(MAX_ATTEMPTS):
        if (known := _found(session, key)) is not None:
            return known
        latest = select(func.max(SuiteVersionRow.version)).where(SuiteVersionRow.scope == key.scope, SuiteVersionRow.name == key.name)
        number = int(session.execute(latest).scalar_one_or_none() or 0) + 1
        row = {
            "scope": key.scope,
            "name": key.name,
            "content_hash": key.content_hash,
            "version": number,
            "first_seen_at": now,
            "first_job_id": job_id,
        }
        session.execute(insert(SuiteVersionRow).values(**row).on_conflict_do_nothing())
    if (known := _found(session, key)) is not None:
        return known
    raise StoreUnavailable(f"no version could be taken for suite {key.name} ({key.scope}) in {MAX_ATTEMPTS} tries; retry")


def suite_versions(session: Session, scope: str, name: str) -> list[SuiteVersion]:
    stmt = select(SuiteVersionRow).where(SuiteVersionRow.scope == scope, SuiteVersionRow.name == name).order_by(SuiteVersionRow.version)
    return [
        SuiteVersion(
            key=SuiteKey(row.scope, row.name, row.content_hash),
            version=row.version,
            first_seen_at=row.first_seen_at,
            first_job_id=row.first_job_id,
        )
        for row in session.scalars(stmt).all()
    ]
