"""`rljob usage` against a live service on loopback whose clock the test moves (fake launcher)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.cli.main import app as cli
from service.config import Settings
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.free_port import free_port
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import T0, TOKEN_A, TOKEN_B, ManualClock, spec_body, wait_for_phase, wait_until


@pytest.fixture
def served(
    store: SqlJobStore,
    fake_launcher: FakeLauncher,
    fake_progress: FakeProgress,
    settings_factory: Callable[..., Settings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[str, ManualClock, Api]]:
    """The app on a real port (the CLI speaks HTTP), a ManualClock, and the same app behind TestClient
    for driving the jobs."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no stray config file from the real home
    monkeypatch.delenv("RLJOB_CONFIG", raising=False)
    add_test_tokens(store)
    clock = ManualClock(T0)
    app = create_app(settings_factory(), store=store, launcher=fake_launcher, progress=fake_progress, clock=clock)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _ready(url), timeout_s=30)
    try:
        yield url, clock, Api(TestClient(app), store, fake_launcher, fake_progress)
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz").status_code == 200
    except httpx.TransportError:
        return False


def _run(url: str, *args: str, token: str = TOKEN_A):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["--url", url, "--token", token, "usage", *args], catch_exceptions=False)


def test_usage_prints_the_teams_table_and_json(served: tuple[str, ManualClock, Api], tmp_path: Path) -> None:
    url, clock, api = served
    body = spec_body(tmp_path, name="tpu-job", hardware={"accelerator": "v6e-8"})
    response = api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A))
    job_id = response.json()["id"]
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    clock.advance(5400)  # 1.5 h x 8 chips = 12 chip-hours at $2.70

    table = _run(url, "--since", "2030-01-01")
    assert table.exit_code == 0, table.output
    assert "usage of team team-a" in table.output
    assert job_id in table.output and "tpu-job" in table.output and "RUNNING" in table.output
    assert "12.00" in table.output and "$32.40" in table.output
    assert "not charged" in " ".join(table.output.split())
    # Where the chips' time went: no goodput report yet, so all 12 chip-hours are `other`.
    assert "chip-hours by part" in table.output
    assert [line.split() for line in table.output.splitlines() if " other " in line] == [["team-a", "other", "12.00", "100%"]]

    as_json = _run(url, "--since", "2030-01-01", "-o", "json")
    report = json.loads(as_json.stdout)
    assert report["total"]["billed_chip_hours"] == 12.0 and report["jobs"][0]["job_id"] == job_id
    assert _run(url, "-o", "name").stdout.split() == [job_id]

    status = CliRunner().invoke(cli, ["--url", url, "--token", TOKEN_A, "status", job_id], catch_exceptions=False)
    assert "12.00 billed chip-hours on 8 chip(s) (v6e-8 on-demand), $32.40" in " ".join(status.output.split())

    other_team = _run(url, "--team", "team-a", token=TOKEN_B)
    assert other_team.exit_code == 2 and "team" in other_team.output and "admins" in other_team.output
    bad_since = _run(url, "--since", "last week")
    assert bad_since.exit_code == 2 and "since" in bad_since.output and "Traceback" not in bad_since.output
