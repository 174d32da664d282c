"""A team's admission lock: a submission's budget check and its insert are one unit per team (service/domain/
submission.py), so the check of one submission sees every job of its team admitted before it, on any replica.

PostgreSQL: a transaction-level advisory lock keyed by the team, released at commit or rollback; other teams'
admissions go on. It is released only after the commit is visible, so the next holder's reads (on any connection,
READ COMMITTED) see the job just admitted. SQLite: the database's one write lock (BEGIN IMMEDIATE), for every team at
once, held until the commit; WAL readers on other connections are not blocked and, since no other writer can commit
meanwhile, read what the lock's holder must count.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import text
from sqlalchemy.orm import Session


def team_admission_lock_key(team: str) -> int:
    """The advisory lock's key: a signed 64-bit integer. Two teams sharing one would only wait for each other."""
    digest = hashlib.blake2b(team.encode(), digest_size=8, person=b"rljob-admit").digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_team_admissions(session: Session, dialect: str, team: str) -> None:
    if dialect == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": team_admission_lock_key(team)})
    elif dialect == "sqlite":
        # pysqlite opens a transaction only at its first write, so one already open holds the write lock already.
        connection = session.connection()
        if not getattr(connection.connection.dbapi_connection, "in_transaction", False):
            connection.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        raise NotImplementedError(f"no admission lock for {dialect}: budget checks would race")
