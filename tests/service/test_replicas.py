"""Two replicas of `rljob serve` on one PostgreSQL database, as the Deployment runs them.

Exactly one leads (launches, watches, reconciles); the other serves the API, and what is submitted or
cancelled through it is carried out by the leader. When the leader is killed (SIGKILL: no clean-up,
no lock released by us), the other takes the lead, re-attaches the running trainer and sees it through:
the trainer started once, the job's phases logged once each, in order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from service.domain.records.phases import JobPhase
from service.free_port import free_port
from service.process_stop import terminate_then_kill
from tests.service.conftest import FAKE_TRAINER
from tests.service.service_helpers import TOKEN_A, spec_body, wait_for_phase, wait_until

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": f"Bearer {TOKEN_A}"}


@contextmanager
def replica(name: str, db_url: str, state: Path, logs: Path) -> Iterator[tuple[httpx.Client, subprocess.Popen[bytes]]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}
    env.update(
        RLJOB_DATABASE_URL=db_url,
        RLJOB_BOOTSTRAP_TOKEN=TOKEN_A,
        RLJOB_BOOTSTRAP_TEAM="team-a",
        RLJOB_TRAINER_COMMAND=json.dumps([sys.executable, str(FAKE_TRAINER)]),
        RLJOB_LEADER_CHECK_INTERVAL_S="0.2",
        RLJOB_PROGRESS_POLL_INTERVAL_S="0.1",
        PYTHONPATH=str(ROOT),
    )
    argv = [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port), "--state-dir", str(state)]
    log_path = logs / f"{name}.stderr"
    with log_path.open("wb") as stderr:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=10)

    def ready() -> bool:
        assert proc.poll() is None, f"{name} exited: {log_path.read_text()[-3000:]}"
        try:
            return client.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(ready, timeout_s=60, interval_s=0.2)
        yield client, proc
    finally:
        client.close()
        terminate_then_kill(proc, grace_s=5)


def _role(client: httpx.Client) -> str:
    return client.get("/readyz").json()["role"]


def _phase(client: httpx.Client, job_id: str) -> str:
    return client.get(f"/v1/jobs/{job_id}").json()["phase"]


def _events(client: httpx.Client, job_id: str) -> list[dict]:
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "0"}) as response:
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def _submit_gated(client: httpx.Client, tmp_path: Path, name: str) -> str:
    body = spec_body(tmp_path, name=name, labels={"fake-gate": "true", "fake-steps": "2"})
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_one_replica_leads_the_other_takes_over_when_it_is_killed(postgres_db: str, tmp_path: Path) -> None:
    state, runs = tmp_path / "state", tmp_path / "runs"
    with (
        replica("first", postgres_db, state, tmp_path) as (first, first_proc),
        replica("second", postgres_db, state, tmp_path) as (second, _),
    ):
        assert (_role(first), _role(second)) == ("leader", "follower")
        assert "rljob_leader 0.0" in second.get("/metrics").text

        # Submitted through the follower: stored there, launched by the leader.
        job = _submit_gated(second, tmp_path, "kept")
        wait_for_phase(lambda: _phase(second, job), JobPhase.RUNNING)
        wait_until(lambda: second.get(f"/v1/jobs/{job}").json()["step"] == 1)
        # Cancelled through the follower: the leader stops the workload.
        doomed = _submit_gated(second, tmp_path, "doomed")
        wait_for_phase(lambda: _phase(second, doomed), JobPhase.RUNNING)
        assert second.post(f"/v1/jobs/{doomed}/cancel").json()["phase"] == JobPhase.CANCELLING
        wait_for_phase(lambda: _phase(second, doomed), JobPhase.CANCELLED)

        first_proc.send_signal(signal.SIGKILL)
        first_proc.wait(timeout=10)
        wait_until(lambda: _role(second) == "leader", timeout_s=30, interval_s=0.1)
        (runs / job / "gate").touch()
        wait_for_phase(lambda: _phase(second, job), JobPhase.SUCCEEDED, timeout_s=60)

        assert (runs / job / "starts").read_text().count("\n") == 1  # re-attached, never started again
        events = _events(second, job)
        assert [e["data"]["phase"] for e in events if e["kind"] == "phase"] == ["QUEUED", "LAUNCHING", "RUNNING", "SUCCEEDED"]
        messages = [e["data"].get("message") or "" for e in events]
        assert any("re-attached" in m for m in messages), messages
        assert "rljob_leader 1.0" in second.get("/metrics").text
    assert "lost the leader lock" not in (tmp_path / "second.stderr").read_text()
