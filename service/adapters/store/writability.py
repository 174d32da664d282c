"""Whether the database can take a write now, for /readyz: a replica that answers reads but cannot store
a submission or a phase is not ready, and says why.

SQLite: another process holding the write lock (a `sqlite3` shell, a backup) makes every write wait out
the busy timeout and fail, and a full disk fails them at once; both are seen here without writing
anything: an immediate transaction taken and rolled back at once, and the free space left beside the
file. PostgreSQL: a server that has become read-only (a replica after a failover, a full disk there).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

MIN_FREE_BYTES = 16 * 2**20  # below this an event append or a WAL checkpoint may fail part-way
LOCK_WAIT_S = 1.0  # a probe that waited the store's own busy timeout (10 s) would time out the probe itself


def write_problem(engine: Engine) -> str | None:
    """Why a write would fail now, or None."""
    if engine.dialect.name == "sqlite":
        database = engine.url.database
        return _sqlite_problem(Path(database)) if database and database != ":memory:" else None
    try:
        with engine.connect() as conn:
            read_only = conn.execute(text("SHOW transaction_read_only")).scalar()
    except SQLAlchemyError as e:
        return f"the database is unreachable: {e.__class__.__name__}"
    return "the database server is read-only (transaction_read_only = on)" if read_only == "on" else None


def _sqlite_problem(path: Path) -> str | None:
    free = shutil.disk_usage(path.parent).free
    if free < MIN_FREE_BYTES:
        return f"the disk holding {path} has {free // 2**20} MiB free: free space there (writes would fail)"
    try:
        conn = sqlite3.connect(path, timeout=LOCK_WAIT_S, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.close()
    except sqlite3.OperationalError as e:
        return f"the SQLite database {path} cannot be written: {e} (another process holds its write lock?)"
    return None
