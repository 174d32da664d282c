"""Hung jobs through the service: the real app and local launcher running the stand-in trainer (harness/fake_trainer.py)
with the trainer's own hang watchdog (trainer/hang_watchdog.py) and a 1 s hang limit (spec.hang_timeout_s).

- fake-hang-at-step 3 hangs once, inside step 3 (before its event and checkpoint): the watchdog writes the stacks of
  every thread to logs/train.log, reports `hung` and exits 79; the service logs the hung attempt, restarts the job
  (a resume and a hung restart spent), the rerun resumes from step 2's checkpoint at step 3, and the job SUCCEEDS.
- fake-hang-always hangs in every attempt: after RLJOB_MAX_HUNG_RESTARTS (1 here) restarts, FAILED with reason HUNG
  and a message naming where it hung and where its stacks are.
About 3 s and 4 s."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.app import create_app
from service.config import Settings
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import TOKEN_A, spec_body, wait_for_phase, wait_until

A = {"Authorization": f"Bearer {TOKEN_A}"}


def _job(client: TestClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=A).json()
    return job


def _trainer_events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


def _run_job(settings: Settings, tmp_path: Path, labels: dict[str, str], ends: JobPhase) -> tuple[dict[str, Any], list[Any]]:
    body = spec_body(tmp_path, labels=labels, hang_timeout_s=1)
    app = create_app(settings)
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        response = client.post("/v1/jobs", json=body, headers=A)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        wait_for_phase(lambda: _job(client, job_id)["phase"], ends, timeout_s=60)
        logged = app.state.runtime.jobs.store.events_after(-1, job_id=job_id, limit=500)
        return _job(client, job_id), logged


def test_a_job_that_hangs_once_gets_its_stacks_logged_and_resumes_from_its_checkpoint(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a", max_hung_restarts=2)
    job, logged = _run_job(settings, tmp_path, {"fake-steps": "4", "fake-hang-at-step": "3"}, JobPhase.SUCCEEDED)
    run = Path(job["run_uri"])

    stage_log = (run / "logs" / "train.log").read_text()
    assert "no progress for" in stage_log and "in hang_mid_step" in stage_log  # the hung main thread's frame
    events = _trainer_events(run)
    second_start = max(i for i, e in enumerate(events) if e["type"] == "run_started")
    assert [e["step"] for e in events[:second_start] if e["type"] == "train_step"] == [1, 2]
    assert [e["step"] for e in events[second_start:] if e["type"] == "train_step"] == [3, 4]  # step 2's checkpoint + 1
    assert [(e["ok"], e["exit_code"]) for e in events if e["type"] == "run_finished"] == [(False, 79), (True, 0)]

    hung = [event.data for event in logged if event.kind == "hung"]
    assert len(hung) == 1 and hung[0]["attempt"] == 1 and hung[0]["stage"] == "train" and hung[0]["step"] == 2
    assert hung[0]["stacks"] == str(run / "logs" / "train.log")
    restart = [
        e.data["message"] for e in logged if e.kind == "phase" and e.data["phase"] == "LAUNCHING" and e.data["previous"] == "RUNNING"
    ]
    assert len(restart) == 1 and "hung restart 1 of 2" in restart[0] and "after train step 2" in restart[0]
    assert job["hung_restarts"] == 1 and job["attempt"] == 2
    assert [(h["attempt"], h["step"]) for h in job["hangs"]] == [(1, 2)]


def test_a_job_that_hangs_every_time_fails_with_reason_hung_after_its_restarts(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a", max_hung_restarts=1)
    job, logged = _run_job(settings, tmp_path, {"fake-steps": "3", "fake-hang-always": "true"}, JobPhase.FAILED)
    run = Path(job["run_uri"])

    assert job["failure"]["reason"] == "HUNG" and job["failure"]["exit_code"] == 79
    assert "attempt 2 hung in the train stage" in job["message"] and str(run / "logs" / "train.log") in job["message"]
    assert "restarted 1 time(s) after hangs" in job["message"]
    assert [e.data["attempt"] for e in logged if e.kind == "hung"] == [1, 2]
    assert len((run / "starts").read_text().splitlines()) == 2  # the first run and one restart, no more
    assert (run / "logs" / "train.log").read_text().count("in hang_mid_step") == 2
