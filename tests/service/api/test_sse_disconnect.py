"""A client that leaves an event stream while events are still flowing (a closed dashboard tab) is
an ordinary end of the stream: nothing is logged at ERROR. Over a real uvicorn: the test client does
not disconnect the way a socket does."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.live_server import served
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from tests.service.conftest import add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body

AUTH = {"Authorization": f"Bearer {TOKEN_A}"}


@pytest.fixture
def live_url(store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path) -> Iterator[str]:
    add_test_tokens(store)
    app = create_app(Settings(state_dir=tmp_path / "state"), store=store, launcher=fake_launcher, progress=fake_progress)
    with served(app) as url:
        yield url


def test_leaving_a_stream_mid_backlog_logs_no_error(live_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with httpx.Client(base_url=live_url, headers=AUTH, timeout=30) as client:
        for i in range(80):
            assert client.post("/v1/jobs", json=spec_body(tmp_path, name=f"j{i}")).status_code == 201
        for _ in range(60):
            # From the first seq: a backlog of events is waiting to be written when the client leaves.
            with client.stream("GET", "/v1/events", headers={"Last-Event-ID": "0"}) as response:
                assert response.status_code == 200
                for n, _line in enumerate(response.iter_lines()):
                    if n == 2:
                        break
        assert client.get("/readyz").status_code == 200
    problems = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert not problems, problems[:2]
