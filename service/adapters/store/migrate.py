"""Runs the Alembic migrations programmatically (at service start and from `rljob token`).

No alembic.ini: the script location is this package, and the caller's engine is handed to env.py,
so the service, the CLI and the tests migrate exactly the database they were configured with.
To add a revision: `alembic -x url=sqlite:///tmp/x.db revision --autogenerate -m "..."` with
`script_location` pointed at service/adapters/store/migrations.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["engine"] = engine
    return config


def upgrade_to_head(engine: Engine) -> None:
    command.upgrade(alembic_config(engine), "head")
