"""Settings refuse unsafe values outside dev; the schema matches the migrations; readiness waits for recovery."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.adapters.store import SqlJobStore
from service.adapters.store.tables import Base
from service.app import create_app
from service.config import Settings
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from service.domain.records.models import Caller
from service.domain.records.ports import Observation
from service.domain.tokens import TokenService
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body, wait_until
from trainer.contract import JobSpec


def test_dev_defaults_use_sqlite_in_the_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLJOB_MAX_CONCURRENT_JOBS", "3")
    settings = Settings(state_dir=tmp_path)
    assert settings.effective_database_url == f"sqlite:///{tmp_path.resolve()}/rljob.db"
    assert settings.max_concurrent_jobs == 3 and settings.launcher == "local"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"environment": "prod"}, "PostgreSQL"),
        ({"environment": "prod", "database_url": "sqlite:////x.db"}, "PostgreSQL"),
        ({"environment": "prod", "database_url": "postgresql://db/rljob", "bootstrap_admin": True}, "BOOTSTRAP_ADMIN"),
        ({"bootstrap_token": "short"}, "at least 32"),
        ({"trainer_command": []}, "at least"),
        ({"launcher": "slurm"}, "launcher"),
    ],
)
def test_unsafe_settings_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        Settings(**overrides)  # type: ignore[arg-type]
    assert message in str(exc.value)


def test_prod_with_postgres_is_accepted() -> None:
    assert Settings(environment="prod", database_url="postgresql://db/rljob").environment == "prod"


def test_migrations_match_the_models(store: SqlJobStore) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []
    store.migrate()  # idempotent


class BlockingLauncher(FakeLauncher):
    """observe() waits until released: recovery takes as long as the test wants."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def observe(self, job_id: str) -> Observation:
        assert self.release.wait(timeout=30), "test never released the launcher"
        return super().observe(job_id)


def test_not_ready_and_no_submissions_until_recovery_is_done(store: SqlJobStore, settings_factory, tmp_path: Path) -> None:
    TokenService(store).ensure(TOKEN_A, "team-a")
    launcher = BlockingLauncher()
    JobService(JobPorts(store, launcher, FakeProgress())).submit(Caller("team-a", "t"), JobSpec.model_validate(spec_body(tmp_path)))
    app = create_app(settings_factory(), store=store, launcher=launcher, progress=FakeProgress())
    with TestClient(app) as client:
        auth = {"Authorization": f"Bearer {TOKEN_A}"}
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["reason"] == "recovering jobs"
        refused = client.post("/v1/jobs", json=spec_body(tmp_path), headers=auth)
        assert refused.status_code == 503 and refused.headers["Retry-After"]
        assert client.get("/v1/jobs", headers=auth).status_code == 200  # reads work meanwhile
        launcher.release.set()
        wait_until(lambda: client.get("/readyz").status_code == 200)
        assert client.post("/v1/jobs", json=spec_body(tmp_path), headers=auth).status_code == 201
