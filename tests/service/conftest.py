"""Fixtures for the service tests: databases (SQLite, and PostgreSQL when available), fakes at the
ports, the real app behind TestClient, and wait helpers that check every phase they pass through."""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from typer.testing import CliRunner, Result

from harness.live_server import served
from harness.pg_server import postgres_url
from service.adapters.events_file import EventsFileReader
from service.adapters.local import LocalProcessLauncher, procs
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.cli.main import app as rljob_cli
from service.config import Settings
from service.domain.tokens import TokenService
from tests.service.observation_recorder import Recorder
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, TOKEN_ADMIN, TOKEN_B, wait_until

FAKE_TRAINER = Path(__file__).resolve().parents[2] / "harness" / "fake_trainer.py"
MakeLocalLauncher = Callable[..., tuple[LocalProcessLauncher, Recorder]]


@pytest.fixture
def fake_trainer_command() -> list[str]:
    return [sys.executable, str(FAKE_TRAINER)]


@pytest.fixture
def live_url(settings_factory: Callable[..., Settings]) -> Iterator[str]:
    """The app on loopback with the local launcher and the stand-in trainer; team-a's token is TOKEN_A."""
    with served(create_app(settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a"))) as url:
        yield url


RunCli = Callable[..., Result]


@pytest.fixture
def run_cli(live_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunCli:
    """`rljob ARGS` through typer's CliRunner against live_url (or `url`), with `token`."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no stray config file from the real home
    monkeypatch.delenv("RLJOB_CONFIG", raising=False)

    def run(*args: str, url: str = live_url, token: str = TOKEN_A) -> Result:
        return CliRunner().invoke(rljob_cli, ["--url", url, "--token", token, *args], catch_exceptions=False)

    return run


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server URL: RLJOB_TEST_POSTGRES_URL, or a throwaway cluster on loopback."""
    with postgres_url() as url:
        yield url


@contextmanager
def fresh_postgres_database(server: str) -> Iterator[str]:
    """A new, empty database on the test server, dropped (connections and all) afterwards."""
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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database per test on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'rljob.db'}"
        return
    with fresh_postgres_database(request.getfixturevalue("postgres_server")) as url:
        yield url


@pytest.fixture
def postgres_db(postgres_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database (for what only PostgreSQL does: replicas)."""
    with fresh_postgres_database(postgres_server) as url:
        yield url


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
            active_jobs_reconcile_interval_s=3600,
            cancel_grace_s=5,
        )
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    return make


@pytest.fixture
def make_local_launcher(tmp_path: Path, fake_trainer_command: list[str]) -> Iterator[MakeLocalLauncher]:
    """Real local launchers over the stand-in trainer, started with a Recorder as their sink; stopped,
    and every trainer they left killed, at the end of the test."""
    started: list[LocalProcessLauncher] = []

    def make(**kw: object) -> tuple[LocalProcessLauncher, Recorder]:
        options: dict[str, object] = {"max_concurrent": 2, "poll_interval_s": 0.05, "cancel_grace_s": 5.0, **kw}
        launcher = LocalProcessLauncher(tmp_path / "jobs", fake_trainer_command, **options)  # type: ignore[arg-type]
        recorder = Recorder()
        launcher.start(recorder)
        started.append(launcher)
        return launcher, recorder

    yield make
    for launcher in started:
        launcher.stop()
    for process_file in (tmp_path / "jobs").glob("*/process.json"):  # never leave a trainer behind
        procs.signal_group(json.loads(process_file.read_text())["pid"], signal.SIGKILL)


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
def api(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, settings_factory: Callable[..., Settings]
) -> Iterator[Api]:
    add_test_tokens(store)
    app = create_app(settings_factory(), store=store, launcher=fake_launcher, progress=fake_progress)
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield Api(client, store, fake_launcher, fake_progress)


@pytest.fixture
def api_reading_events(store: SqlJobStore, settings_factory: Callable[..., Settings]) -> Iterator[Api]:
    """The real app with the real EventsFileReader (the `api` fixture fakes progress). Folding may take the whole
    core: these tests write tens of thousands of events to check what is kept, and the pacer's rests (its share
    of the CPU, tests/service/domain/test_fold_pacer.py) would only make them wait."""
    add_test_tokens(store)
    launcher = FakeLauncher()
    app = create_app(settings_factory(progress_fold_cpu_share=1.0), store=store, launcher=launcher, progress=EventsFileReader())
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield Api(client, store, launcher, None)  # type: ignore[arg-type]
