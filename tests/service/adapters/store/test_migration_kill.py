"""A service SIGKILLed in the middle of a schema migration (first start, or an upgrade) starts again.

The migration runs in a real child process that kills itself (SIGKILL) right after a chosen DDL
statement; the next migration must bring the database to head with the jobs stored before intact.
Found by bench/control_plane/kill_loop.py's kills during start-up: through pysqlite each DDL statement committed on
its own, so a kill between two CREATE TABLEs left tables without a version row, and every later start
failed with "table ... already exists" (an upgrade: "duplicate column name").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from service.adapters.store import SqlJobStore
from service.adapters.store.migrate import alembic_config
from tests.service.service_helpers import record_spec

REPO = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.timeout(120)

# Runs the service's migration and SIGKILLs itself after the `nth` statement starting with `prefix`.
KILL_MID_MIGRATION = """
import os, signal, sys
from sqlalchemy import event
from service.adapters.store import SqlJobStore

url, prefix, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = SqlJobStore(url)
seen = 0

@event.listens_for(store.engine, "after_cursor_execute")
def kill_after(conn, cursor, statement, parameters, context, executemany):
    global seen
    if statement.lstrip().upper().startswith(prefix):
        seen += 1
        if seen == nth:
            os.kill(os.getpid(), signal.SIGKILL)

store.migrate()
sys.exit(3)  # the statement never ran: the test's kill point is wrong
"""

OLD_JOB = (
    "INSERT INTO jobs (id, team, name, phase, spec, spec_hash, message, latest_metrics, stage_times,"
    " artifacts, attempt, resumes, last_trainer_seq, last_event_seq, created_at, updated_at)"
    " VALUES ('rl-0000000old01', 'team-a', 'old', 'RUNNING', :spec, '', '', '{}', '{}', '{}', 1, 0, 4, 0,"
    " '2030-01-01 00:00:00.000000', '2030-01-01 00:00:00.000000')"
)


def _migrate_and_die(db_url: str, prefix: str, nth: int) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", KILL_MID_MIGRATION, db_url, prefix, str(nth)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == -9, f"the migration was not killed mid-way (exit {done.returncode}): {done.stderr[-2000:]}"


def _head(store: SqlJobStore) -> str:
    return ScriptDirectory.from_config(alembic_config(store.engine)).get_current_head()  # type: ignore[return-value]


def _revision(store: SqlJobStore) -> str | None:
    with store.engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def test_a_first_start_killed_between_two_create_tables_migrates_on_the_next_start(db_url: str) -> None:
    _migrate_and_die(db_url, "CREATE TABLE", 2)  # alembic_version, then the first table of 0001
    store = SqlJobStore(db_url)
    try:
        assert _revision(store) is None, "the killed migration left a version behind"
        store.migrate()
        assert _revision(store) == _head(store)
        tables = set(inspect(store.engine).get_table_names())
        assert {"jobs", "job_events", "api_tokens"} <= tables and not any(t.startswith("_alembic_tmp") for t in tables)
    finally:
        store.close()


def test_an_upgrade_killed_between_two_statements_keeps_the_jobs_and_migrates_on_the_next_start(db_url: str) -> None:
    store = SqlJobStore(db_url)
    try:
        command.upgrade(alembic_config(store.engine), "0002")
        with store.engine.begin() as conn:
            conn.execute(text(OLD_JOB), {"spec": record_spec(name="old").model_dump_json()})
    finally:
        store.close()
    _migrate_and_die(db_url, "ALTER TABLE", 1)  # 0003 adds two columns: killed between the two
    store = SqlJobStore(db_url)
    try:
        assert _revision(store) == "0002"
        store.migrate()
        assert _revision(store) == _head(store)
        old = store.get("rl-0000000old01")
        assert old is not None and old.name == "old" and old.health_verdict is None
        assert not any(t.startswith("_alembic_tmp") for t in inspect(store.engine).get_table_names())
    finally:
        store.close()
