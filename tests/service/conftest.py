"""Fixtures for the service tests: databases (SQLite, and PostgreSQL when available), fakes at the
ports, the real app behind TestClient, and wait helpers that check every phase they pass through."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from service.domain.tokens import TokenService

from fastapi.testclient import TestClient
from service_fakes import FakeLauncher, FakeProgress
from service_helpers import TOKEN_A, TOKEN_ADMIN, TOKEN_B, wait_until

FAKE_TRAINER = Path(__file__).parent / "fake_trainer.py"
PG_BIN_DIRS = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"]

@pytest.fixture
def fake_trainer_command() -> list[str]:
    return [sys.executable, str(FAKE_TRAINER)]


def _pg_tool(name: str) -> str | None:
    for d in PG_BIN_DIRS:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server URL: RLJOB_TEST_POSTGRES_URL, or a throwaway cluster on loopback."""
    if os.environ.get("RLJOB_TEST_POSTGRES_URL"):
        yield os.environ["RLJOB_TEST_POSTGRES_URL"]
        return
    initdb, pg_ctl = _pg_tool("initdb"), _pg_tool("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL not available: set RLJOB_TEST_POSTGRES_URL or install postgresql (initdb, pg_ctl)")
    # Not under pytest's basetemp: concurrent pytest sessions prune old numbered dirs there.
    base = Path(tempfile.mkdtemp(prefix="rljob-test-pg-"))
    data = base / "data"
    port = _free_port()
    # initdb refuses to run as root: run the cluster as the postgres user then.
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start a throwaway PostgreSQL")
        prefix = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        os.chmod(base, 0o755)
    subprocess.run([*prefix, initdb, "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(data)],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run(
        [*prefix, pg_ctl, "-D", str(data), "-l", str(data / "server.log"), "-w",
         "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {data} -c fsync=off", "start"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database per test on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'rljob.db'}"
        return
    server = request.getfixturevalue("postgres_server")
    name = f"rljob_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def store(db_url: str) -> Iterator[SqlJobStore]:
    s = SqlJobStore(db_url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def settings_factory(tmp_path: Path, fake_trainer_command: list[str]) -> Callable[..., Settings]:
    def make(**overrides: object) -> Settings:
        values: dict[str, object] = dict(
            state_dir=tmp_path / "state",
            trainer_command=fake_trainer_command,
            local_poll_interval_s=0.05,
            progress_poll_interval_s=0.05,
            sse_poll_interval_s=0.2,
            reconcile_interval_s=3600,
            cancel_grace_s=5,
        )
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    return make


@pytest.fixture
def fake_launcher() -> FakeLauncher:
    return FakeLauncher()


@pytest.fixture
def fake_progress() -> FakeProgress:
    return FakeProgress()


class Api:
    """The real app (real store) with fakes at the launcher/progress ports, behind TestClient."""

    def __init__(self, client: TestClient, store: SqlJobStore, launcher: FakeLauncher, progress: FakeProgress) -> None:
        self.client, self.store, self.launcher, self.progress = client, store, launcher, progress

    def as_(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def submit(self, body: dict[str, object], token: str = TOKEN_A, **headers: str) -> dict[str, object]:
        response = self.client.post("/v1/jobs", json=body, headers={**self.as_(token), **headers})
        assert response.status_code == 201, response.text
        return response.json()

    def phase(self, job_id: str, token: str = TOKEN_A) -> str:
        return self.client.get(f"/v1/jobs/{job_id}", headers=self.as_(token)).json()["phase"]


def add_test_tokens(store: SqlJobStore) -> None:
    tokens = TokenService(store)
    tokens.ensure(TOKEN_A, "team-a")
    tokens.ensure(TOKEN_B, "team-b")
    tokens.ensure(TOKEN_ADMIN, "ops", admin=True)


@pytest.fixture
def api(store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress,
        settings_factory: Callable[..., Settings]) -> Iterator[Api]:  # fmt: skip
    add_test_tokens(store)
    app = create_app(settings_factory(), store=store, launcher=fake_launcher, progress=fake_progress)
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield Api(client, store, fake_launcher, fake_progress)
