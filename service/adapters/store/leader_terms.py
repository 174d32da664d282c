"""Leadership terms in the database: taken by each new leader, checked by every write it makes as leader.

A term is a number that only grows (leader_terms, one row). Taking one is an UPDATE of that row; a
check reads it with FOR SHARE (PostgreSQL) inside the writing transaction, so the two serialise on the
row: a check that runs before the new term commits holds the row until its own write commits (that
write lands within the old term, before the new leader starts), and a check after it sees the new
number and refuses the write. SQLite has one writer at a time and one service per file (the file lock),
so a plain read is enough there.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.domain.records.errors import LeaderFenced

from .tables import LeaderTermRow

LEADER_ROW = "leader"


def take_term(session: Session, holder: str, now: datetime) -> int:
    """The next term, now this replica's (call in a transaction of its own)."""
    taken = session.execute(
        update(LeaderTermRow)
        .where(LeaderTermRow.name == LEADER_ROW)
        .values(term=LeaderTermRow.term + 1, holder=holder[:255], taken_at=now)
        .returning(LeaderTermRow.term)
    ).scalar_one()
    return int(taken)


def require_term(session: Session, term: int | None, *, lock_row: bool) -> None:
    """LeaderFenced unless `term` is still the current one; with lock_row the row stays share-locked
    until the transaction ends, so no new term can be taken before this transaction's writes commit."""
    query = select(LeaderTermRow.term).where(LeaderTermRow.name == LEADER_ROW)
    if lock_row:
        query = query.with_for_update(read=True)
    current = int(session.execute(query).scalar_one())
    if term != current:
        raise LeaderFenced(term, current)
