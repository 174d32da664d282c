"""Alembic environment: migrates the engine given in config.attributes["engine"] (see migrate.py)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from service.adapters.store.tables import Base

config = context.config
engine = config.attributes.get("engine")
if engine is None:  # the alembic command line: `alembic -x url=... upgrade head`
    engine = create_engine(context.get_x_argument(as_dictionary=True)["url"])

with engine.begin() as connection:
    # render_as_batch: SQLite cannot ALTER most things; batch mode rebuilds tables instead.
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
