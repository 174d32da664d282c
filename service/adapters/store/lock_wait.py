"""How long a write transaction waits for a lock another transaction holds, and how the wait ends.

By default SQLite's busy timeout (BUSY_TIMEOUT_MS) and PostgreSQL's server setting (no limit unless configured)
decide. A transaction given a wait (`SqlJobStore.transaction(wait_s=...)`: a request's write, service/domain/
write_wait.py) waits at most that: SQLite's busy timeout for that transaction only (a connection setting, restored
before the connection goes back to the pool), PostgreSQL's `lock_timeout` for that transaction (SET LOCAL ends with
it). Past it the database refuses the statement, the transaction rolls back, and nothing it did is stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import PoolProxiedConnection

BUSY_TIMEOUT_MS = 10_000  # SQLite: how long a write waits for another's lock when nothing shorter is asked
PG_LOCK_NOT_AVAILABLE = "55P03"  # the SQLSTATE of a statement that waited out lock_timeout


@contextmanager
def lock_wait(session: Session, dialect: str, wait_s: float | None) -> Iterator[None]:
    """The session's transaction waits at most `wait_s` for another's lock (None: the database's own wait)."""
    if wait_s is None:
        yield
        return
    wait_ms = max(1, round(wait_s * 1000))
    if dialect == "postgresql":
        session.execute(text(f"SET LOCAL lock_timeout = {wait_ms}"))  # an int: SET takes no bound parameters
        yield
        return
    if dialect != "sqlite":
        yield
        return
    # On the driver's connection, not through the session: the restore must run after a failed statement too, when
    # the session refuses any until it has rolled back. A PRAGMA opens no transaction (pysqlite opens one before a
    # write), so the admission lock's BEGIN IMMEDIATE is still the transaction's first statement (sql_store.py).
    driver = session.connection().connection
    _busy_timeout(driver, wait_ms)
    try:
        yield
    finally:
        _busy_timeout(driver, BUSY_TIMEOUT_MS)


def _busy_timeout(driver: PoolProxiedConnection, wait_ms: int) -> None:
    cursor = driver.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {wait_ms}")  # an int: PRAGMA takes no bound parameters
    finally:
        cursor.close()


def waited_out(error: OperationalError) -> bool:
    """Whether the statement failed because another transaction held a lock past the wait."""
    return getattr(error.orig, "sqlstate", None) == PG_LOCK_NOT_AVAILABLE or "locked" in str(error.orig)
