"""Alembic environment: migrates the engine given in config.attributes["engine"] (see migrate.py).

The whole upgrade is one transaction on every database, so a service killed mid-migration leaves the
schema as it was and the next start simply migrates again. PostgreSQL has transactional DDL as is;
pysqlite runs each DDL statement outside any transaction (it only BEGINs before INSERT/UPDATE/DELETE),
so there the driver's transaction handling is switched off (AUTOCOMMIT) and the upgrade is wrapped in
an explicit BEGIN IMMEDIATE ... COMMIT (IMMEDIATE: a second process migrating at once waits, then
finds nothing left to do).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from service.adapters.store.tables import Base

config = context.config
engine = config.attributes.get("engine")
if engine is None:  # the alembic command line: `alembic -x url=... upgrade head`
    engine = create_engine(context.get_x_argument(as_dictionary=True)["url"])


def run_migrations(connection: Connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things; batch mode rebuilds tables instead.
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if engine.dialect.name == "sqlite":
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        # A batch operation rebuilds a table: copy, DROP, rename. With foreign keys on (every connection of
        # the store turns them on), that DROP deletes the rows that reference it (job_labels' ON DELETE
        # CASCADE). SQLite ignores this pragma inside a transaction, so it is set first, and the keys are
        # checked before the commit (SQLite's own procedure for schema changes, "ALTER TABLE").
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                run_migrations(connection)
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"the migration left rows whose foreign keys point nowhere: {broken[:5]}")
            except BaseException:
                connection.exec_driver_sql("ROLLBACK")
                raise
            connection.exec_driver_sql("COMMIT")
        finally:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
else:
    with engine.begin() as connection:
        run_migrations(connection)
