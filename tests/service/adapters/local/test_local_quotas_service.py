"""The real app with team quotas on the local launcher (RLJOB_TEAM_MAX_JOBS) and real child processes:
a waiting job is QUEUED with its queue in GET /v1/jobs/{id}, starts when its team's job ends, stays
in line across a service restart, and `rljob list` / `rljob status` show where it waits."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from harness.live_server import served
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.cli.main import app as cli
from service.config import Settings
from service.domain.records.phases import JobPhase
from service.domain.tokens import TokenService
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body, wait_for_phase, wait_until

A = {"Authorization": f"Bearer {TOKEN_A}"}
B = {"Authorization": f"Bearer {TOKEN_B}"}


def _settings(settings_factory: Callable[..., Settings]) -> Settings:
    settings = settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a", team_max_jobs=1)
    store = SqlJobStore(settings.effective_database_url)
    store.migrate()
    TokenService(store).ensure(TOKEN_B, "team-b")
    store.close()
    return settings


@contextmanager
def running_service(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield client


def _submit(client: TestClient, tmp_path: Path, name: str, headers: dict[str, str] = A, **extra: Any) -> str:
    body = spec_body(tmp_path, name=name, labels={"fake-gate": "true"}, **extra)
    response = client.post("/v1/jobs", json=body, headers=headers)
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


def _job(client: TestClient, job_id: str, headers: dict[str, str] = A) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    return job


def _wait_queued(client: TestClient, job_id: str) -> dict[str, Any]:
    wait_until(lambda: (_job(client, job_id)["queue"] or {}).get("reason") is not None)
    return _job(client, job_id)


def _open_gate(tmp_path: Path, job_id: str) -> None:
    root = tmp_path / "runs" / job_id
    wait_until((root / "starts").exists)
    (root / "gate").touch()


def _phase_log(client: TestClient, job_id: str) -> list[dict[str, Any]]:
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers={**A, "Last-Event-ID": "0"}) as response:
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def test_the_api_shows_where_a_queued_job_waits_and_it_starts_when_its_team_has_room(settings_factory, tmp_path: Path) -> None:
    with running_service(_settings(settings_factory)) as client:
        first = _submit(client, tmp_path, "first")
        wait_for_phase(lambda: _job(client, first)["phase"], JobPhase.RUNNING)
        second = _submit(client, tmp_path, "second")
        other_team = _submit(client, tmp_path, "theirs", headers=B)
        wait_for_phase(lambda: _job(client, other_team, B)["phase"], JobPhase.RUNNING)

        job = _wait_queued(client, second)
        assert job["phase"] == "QUEUED" and job["backend"] == "local"
        assert job["queue"] == {
            "name": "team/team-a",
            "position": 1,
            "reason": "TeamJobLimit",
            "message": "team-a runs 1 of its 1 concurrent jobs",
        }
        assert job["message"] == "waiting in team/team-a: team-a runs 1 of its 1 concurrent jobs"
        assert not (tmp_path / "runs" / second).exists()

        _open_gate(tmp_path, first)
        wait_for_phase(lambda: _job(client, second)["phase"], JobPhase.RUNNING)
        assert _job(client, second)["queue"] is None
        for job_id, headers in ((second, A), (other_team, B)):
            _open_gate(tmp_path, job_id)
            wait_for_phase(lambda: _job(client, job_id, headers)["phase"], JobPhase.SUCCEEDED)  # noqa: B023
        events = _phase_log(client, second)
        phases = [e["data"]["phase"] for e in events if e["kind"] == "phase"]
        assert phases == ["QUEUED", "LAUNCHING", "QUEUED", "RUNNING", "SUCCEEDED"]
        queued = next(e["data"] for e in events if e["kind"] == "phase" and e["data"].get("queue"))
        assert queued["queue"]["reason"] == "TeamJobLimit" and queued["queue"]["position"] == 1


def test_a_job_waiting_in_its_teams_queue_stays_there_across_a_service_restart(settings_factory, tmp_path: Path) -> None:
    settings = _settings(settings_factory)
    with running_service(settings) as client:
        first = _submit(client, tmp_path, "first")
        wait_for_phase(lambda: _job(client, first)["phase"], JobPhase.RUNNING)
        older = _submit(client, tmp_path, "older")
        _wait_queued(client, older)
        urgent = _submit(client, tmp_path, "urgent", priority="high")
        wait_until(lambda: (_job(client, older)["queue"] or {}).get("position") == 2)
        _open_gate(tmp_path, first)  # the high-priority job goes next, ahead of the older one
        wait_for_phase(lambda: _job(client, urgent)["phase"], JobPhase.RUNNING)
        # Its place is recomputed by the launcher's next admission pass, not in the write that started urgent.
        wait_until(lambda: (_job(client, older)["queue"] or {}).get("position") == 1)

    # Restarted: recovery reaches the older queued job before the newer running one (oldest first).
    # The running trainer still holds team-a's only slot, so the older job must wait again, not start.
    with running_service(settings) as client:
        job = _wait_queued(client, older)
        assert job["phase"] == "QUEUED" and job["queue"]["reason"] == "TeamJobLimit"
        assert _job(client, urgent)["phase"] == "RUNNING"
        assert not (tmp_path / "runs" / older).exists()
        _open_gate(tmp_path, urgent)
        wait_for_phase(lambda: _job(client, older)["phase"], JobPhase.RUNNING)
        _open_gate(tmp_path, older)
        wait_for_phase(lambda: _job(client, older)["phase"], JobPhase.SUCCEEDED)
        # Each change of its place in line was logged as a `queue` event, and the event stream carries it.
        moves = [(e["data"]["position"], e["data"]["reason"]) for e in _phase_log(client, older) if e["kind"] == "queue"]
        assert moves[:2] == [(2, "TeamJobLimit"), (1, "TeamJobLimit")]
    for job_id in (first, urgent, older):
        assert len((tmp_path / "runs" / job_id / "starts").read_text().splitlines()) == 1


@contextmanager
def live_url(settings: Settings) -> Iterator[str]:
    with served(create_app(settings), log_config=uvicorn.config.LOGGING_CONFIG) as url:
        yield url


def test_rljob_list_and_status_show_the_queue(settings_factory, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no stray config file from the real home
    monkeypatch.delenv("RLJOB_CONFIG", raising=False)
    monkeypatch.setenv("COLUMNS", "200")  # one table row per job
    with live_url(_settings(settings_factory)) as url:

        def run(*args: str) -> str:
            result = CliRunner().invoke(cli, ["--url", url, "--token", TOKEN_A, *args], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            return result.output

        with httpx.Client(base_url=url, headers=A) as http:
            ids = [
                http.post("/v1/jobs", json=spec_body(tmp_path, name=f"job-{i}", labels={"fake-gate": "true"})).json()["id"]
                for i in range(3)
            ]
            wait_until(lambda: http.get(f"/v1/jobs/{ids[2]}").json()["queue"] is not None)
            wait_until(lambda: (http.get(f"/v1/jobs/{ids[1]}").json()["queue"] or {}).get("position") == 1)

            listed = run("list")
            assert "QUEUE" in listed.splitlines()[1]
            rows = {job_id: next(line for line in listed.splitlines() if job_id in line) for job_id in ids}
            assert "#1 TeamJobLimit" in rows[ids[1]] and "#2 TeamJobLimit" in rows[ids[2]]
            assert "TeamJobLimit" not in rows[ids[0]]
            status = run("status", ids[2])
            assert "queue" in status and "#2 in team/team-a: TeamJobLimit" in status
            assert "team-a runs 1 of its 1 concurrent jobs" in status
            for job_id in ids:
                http.post(f"/v1/jobs/{job_id}/cancel")
            for job_id in ids:
                wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["phase"] == "CANCELLED")  # noqa: B023
