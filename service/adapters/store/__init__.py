"""The job store adapter: SQLAlchemy 2 on SQLite (embedded default) or PostgreSQL, migrated by Alembic."""

from .sql_store import SqlJobStore, build_engine

__all__ = ["SqlJobStore", "build_engine"]
