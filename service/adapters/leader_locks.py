"""Leader locks, the LeaderLock port's adapters (service/domain/records/ports.py): what lets exactly one
service replica run launch, watch and reconcile.

Chosen in one place (`leader_lock_for`) by the store the service uses:
- PostgreSQL: a session-level advisory lock on a connection of its own. The database releases it when
  that connection ends, so a replica that dies (SIGKILL, node lost) hands the lead over as soon as
  PostgreSQL sees its connection close; TCP keepalives bound that when the network, not the process,
  died. Advisory locks are per database: two rljob deployments on one server but in two databases
  never contend.
- SQLite (the embedded default): one process owns the database file. An exclusive `flock` on a file
  beside it makes a second `rljob serve` on the same state directory refuse to start with a message,
  instead of launching every job twice. SQLite is no place for replicas: use PostgreSQL for those.
- A store without a URL (tests' in-memory fakes) or in-memory SQLite: nothing else can reach it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from pathlib import Path
from typing import IO

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from service.domain.records.ports import LeaderLock

log = logging.getLogger(__name__)

# pg_try_advisory_lock's 64-bit key: the bytes of "rljob-ld", so it is recognisable in pg_locks.
LEADER_LOCK_KEY = int.from_bytes(b"rljob-ld", "big") & 0x7FFF_FFFF_FFFF_FFFF
# PostgreSQL: how soon a leader whose network (not process) died notices, and its successor can take over.
KEEPALIVE = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,
    "connect_timeout": 5,
}


class ProcessLock:
    """Nothing outside this process can reach the store: it always leads."""

    shared = False

    def try_acquire(self) -> bool:
        return True

    def holds(self) -> bool:
        return True

    def release(self) -> None:
        pass


class StateDirInUse(RuntimeError):
    pass


class FileLock:
    """An exclusive flock beside the SQLite file; the kernel drops it when the process ends."""

    shared = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def try_acquire(self) -> bool:
        if self._file is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = self.path.open("a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise StateDirInUse(
                f"{holder} already serves the SQLite database beside {self.path}: one process per state "
                "directory. Stop it, use another --state-dir, or run replicas on PostgreSQL "
                "(RLJOB_DATABASE_URL)"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"rljob serve (pid {os.getpid()} on {socket.gethostname()})\n")
        f.flush()
        self._file = f
        return True

    def holds(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class PostgresAdvisoryLock:
    """pg_try_advisory_lock on a dedicated connection (never the pool's: the lock lives as long as it)."""

    shared = True

    def __init__(self, url: str, *, key: int = LEADER_LOCK_KEY) -> None:
        parsed = make_url(url)
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        name = f"rljob-leader {socket.gethostname()} {os.getpid()}"[:63]  # pg_stat_activity shows who leads
        self._engine = create_engine(
            parsed,
            poolclass=NullPool,
            connect_args={**KEEPALIVE, "application_name": name, "options": "-c statement_timeout=5000"},
        )
        self._key = key
        self._conn: Connection | None = None

    def try_acquire(self) -> bool:
        try:
            if self._conn is None:
                self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            got = self._conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key}).scalar()
        except SQLAlchemyError as e:
            log.warning("could not ask PostgreSQL for the leader lock: %s", e.__class__.__name__)
            self._drop()
            return False
        return bool(got)

    def holds(self) -> bool:
        if self._conn is None:
            return False
        try:
            # The connection being alive is the hold: the server ends a session's locks with it.
            self._conn.execute(text("SELECT 1")).scalar()
        except SQLAlchemyError as e:
            log.error("the leader lock's database connection failed (%s): the lock is lost", e.__class__.__name__)
            self._drop()
            return False
        return True

    def release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
            except SQLAlchemyError:
                pass  # closing the connection below releases it anyway
        self._drop()
        self._engine.dispose()

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except SQLAlchemyError:
                pass
            self._conn = None


def leader_lock_for(database_url: str | None) -> LeaderLock:
    """The lock that fits the store: the one place the choice is made."""
    if database_url is None:
        return ProcessLock()
    parsed = make_url(database_url)
    if parsed.get_backend_name() == "postgresql":
        return PostgresAdvisoryLock(database_url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        return FileLock(Path(parsed.database + ".serve-lock"))
    return ProcessLock()
