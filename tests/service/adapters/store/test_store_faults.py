"""Storage faults are the service's, not the request's: a SQLite database another process holds the
write lock of, or a disk about to be full, makes writes answer 503 with the reason (not 500) and
/readyz report not ready, saying why; reads go on; both recover when the fault ends."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.adapters.store import SqlJobStore, writability
from service.app import create_app
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body, wait_until

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def sqlite_api(tmp_path: Path, settings_factory: Callable[..., Any]) -> Iterator[tuple[Api, Path]]:
    path = tmp_path / "faults.db"
    store = SqlJobStore(f"sqlite:///{path}")
    store.migrate()
    add_test_tokens(store)
    launcher = FakeLauncher()
    app = create_app(settings_factory(), store=store, launcher=launcher, progress=FakeProgress())
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield Api(client, store, launcher, FakeProgress()), path
    store.close()


def test_a_locked_sqlite_database_is_a_503_with_the_reason_and_not_ready(sqlite_api: tuple[Api, Path], tmp_path: Path) -> None:
    api, path = sqlite_api
    job = api.submit(spec_body(tmp_path, name="before"))
    holder = sqlite3.connect(path, isolation_level=None)  # another process's write transaction, left open
    holder.execute("BEGIN IMMEDIATE")
    try:
        ready = api.client.get("/readyz")
        assert ready.status_code == 503 and "cannot be written" in ready.json()["reason"], ready.text
        refused = api.client.post("/v1/jobs", json=spec_body(tmp_path, name="during"), headers=api.as_(TOKEN_A))
        assert refused.status_code == 503 and "database is locked" in refused.json()["detail"], refused.text
        assert refused.headers.get("Retry-After")
        assert api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(TOKEN_A)).status_code == 200  # reads go on
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert api.client.get("/readyz").status_code == 200
    api.submit(spec_body(tmp_path, name="after"))


def test_a_disk_about_to_be_full_makes_the_replica_not_ready(sqlite_api: tuple[Api, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    api, path = sqlite_api
    # No full file system can be made here (no mounts): the threshold is raised above what is free instead.
    monkeypatch.setattr(writability, "MIN_FREE_BYTES", shutil.disk_usage(path.parent).free + 2**30)
    ready = api.client.get("/readyz")
    assert ready.status_code == 503 and "free space there" in ready.json()["reason"], ready.text
    monkeypatch.undo()
    assert api.client.get("/readyz").status_code == 200
