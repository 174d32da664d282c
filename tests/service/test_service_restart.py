"""The real app with the local launcher and real child processes: run, cancel, and restart the service
mid-job (re-attach to a live trainer, or resume a dead one), each job finishing exactly once."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from service.adapters.local import procs
from service.app import create_app
from service.config import Settings
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import TOKEN_A, spec_body, wait_for_phase, wait_until
from trainer.contract import parse_event

AUTH = {"Authorization": f"Bearer {TOKEN_A}"}


@contextmanager
def running_service(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield client


def _settings(settings_factory: Callable[..., Settings], **kw: object) -> Settings:
    return settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a", **kw)


def _phase(client: TestClient, job_id: str) -> str:
    return client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["phase"]


def _run_root(tmp_path: Path, job_id: str) -> Path:
    return tmp_path / "runs" / job_id


def _submit_gated(client: TestClient, tmp_path: Path) -> str:
    body = spec_body(tmp_path, labels={"fake-gate": "true", "fake-steps": "2"})
    job_id = client.post("/v1/jobs", json=body, headers=AUTH).json()["id"]
    wait_for_phase(lambda: _phase(client, job_id), JobPhase.RUNNING)
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["step"] == 1)
    return job_id


def _pid(client: TestClient, job_id: str) -> int:
    return int(client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["object_name"].split(":")[1])


def _phase_log(client: TestClient, job_id: str) -> list[str]:
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers={**AUTH, "Last-Event-ID": "0"}) as response:
        datas = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    return [d["data"]["phase"] for d in datas if d["kind"] == "phase"]


def _attempts(run_root: Path) -> list[list]:
    """The run's events.jsonl split at each run_started: one list of events per trainer start."""
    attempts: list[list] = []
    for line in (run_root / "events.jsonl").read_text().splitlines():
        event = parse_event(line)
        if event.type == "run_started":
            attempts.append([])
        attempts[-1].append(event)
    return attempts


def test_restart_after_the_trainer_died_fails_clearly_when_resumes_are_used_up(settings_factory, tmp_path: Path) -> None:
    settings = _settings(settings_factory, max_resumes=0)
    with running_service(settings) as client:
        job_id = _submit_gated(client, tmp_path)
        pid = _pid(client, job_id)
    procs.signal_group(pid, signal.SIGKILL)
    wait_until(lambda: procs.group_members(pid) == [])
    with running_service(settings) as client:
        job = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        assert job["phase"] == "FAILED" and job["failure"]["reason"] == "ResumeLimit"
        assert "without recording an exit code" in job["message"] and "submit the job again" in job["message"]
    assert len((_run_root(tmp_path, job_id) / "starts").read_text().splitlines()) == 1


def test_job_runs_to_success_with_progress_visible(settings_factory, tmp_path: Path) -> None:
    with running_service(_settings(settings_factory)) as client:
        job_id = client.post("/v1/jobs", json=spec_body(tmp_path, labels={"fake-steps": "3"}), headers=AUTH).json()["id"]
        wait_for_phase(lambda: _phase(client, job_id), JobPhase.SUCCEEDED)
        job = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        assert (job["step"], job["total_steps"], job["metrics"]["eval_accuracy"]) == (3, 3, 0.5)
        # The fake trainer writes no manifest.json, so the artifact is as its event announced it.
        assert job["artifacts"] == [
            {"name": "hf_model", "uri": f"{_run_root(tmp_path, job_id)}/hf", "size_bytes": 7, "file_count": None, "checksum": None}
        ]
        assert set(job["stage_times"]) == {"convert", "train", "export"} and job["backend"] == "local"
        points = client.get(f"/v1/jobs/{job_id}/metrics", headers=AUTH).json()["points"]
        assert [p["step"] for p in points if p["kind"] == "train"] == [1, 2, 3]
        assert "event run_finished" in client.get(f"/v1/jobs/{job_id}/logs", headers=AUTH).text


def test_failed_trainer_gives_an_actionable_failure(settings_factory, tmp_path: Path) -> None:
    with running_service(_settings(settings_factory)) as client:
        body = spec_body(tmp_path, labels={"fake-exit": "65"})
        job_id = client.post("/v1/jobs", json=body, headers=AUTH).json()["id"]
        wait_for_phase(lambda: _phase(client, job_id), JobPhase.FAILED)
        failure = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["failure"]
        assert failure["reason"] == "INVALID_SPEC" and failure["exit_code"] == 65
        assert "fix the spec and submit a new job" in failure["message"] and failure["failed_stage"] == "train"


def test_cancel_stops_the_process_group_then_reports_cancelled(settings_factory, tmp_path: Path) -> None:
    with running_service(_settings(settings_factory)) as client:
        job_id = _submit_gated(client, tmp_path)
        pid = _pid(client, job_id)
        assert client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH).json()["phase"] == "CANCELLING"
        wait_for_phase(lambda: _phase(client, job_id), JobPhase.CANCELLED)
        assert procs.group_members(pid) == []  # CANCELLED only once nothing of the job runs
        assert _phase_log(client, job_id)[-2:] == ["CANCELLING", "CANCELLED"]


def test_restart_reattaches_and_the_job_finishes_exactly_once(settings_factory, tmp_path: Path) -> None:
    settings = _settings(settings_factory)
    with running_service(settings) as client:
        job_id = _submit_gated(client, tmp_path)
        pid = _pid(client, job_id)
    # The service is down; the trainer is not.
    assert procs.is_our_process(pid, marker="job_runner.py", job_id=job_id, ticks=None)
    with running_service(settings) as client:
        job = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        assert job["phase"] == "RUNNING" and "re-attached" in job["message"] and job["object_name"] == f"pid:{pid}"
        (_run_root(tmp_path, job_id) / "gate").touch()
        wait_for_phase(lambda: _phase(client, job_id), JobPhase.SUCCEEDED)
        assert client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()["step"] == 2
        assert _phase_log(client, job_id) == ["QUEUED", "LAUNCHING", "RUNNING", "SUCCEEDED"]
    assert len((_run_root(tmp_path, job_id) / "starts").read_text().splitlines()) == 1


def test_restart_after_the_trainer_died_resumes_it_once(settings_factory, tmp_path: Path) -> None:
    settings = _settings(settings_factory)
    with running_service(settings) as client:
        job_id = _submit_gated(client, tmp_path)
        pid = _pid(client, job_id)
    procs.signal_group(pid, signal.SIGKILL)  # lost with the machine: no exit record
    wait_until(lambda: procs.group_members(pid) == [])
    with running_service(settings) as client:
        wait_until(lambda: (_run_root(tmp_path, job_id) / "starts").read_text().count("\n") == 2)
        (_run_root(tmp_path, job_id) / "gate").touch()
        wait_for_phase(lambda: _phase(client, job_id), JobPhase.SUCCEEDED)
        job = client.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        assert job["attempt"] == 2 and job["stage_times"]["convert"]["skipped"] is True
        assert _phase_log(client, job_id) == ["QUEUED", "LAUNCHING", "RUNNING", "LAUNCHING", "RUNNING", "SUCCEEDED"]
        points = client.get(f"/v1/jobs/{job_id}/metrics", headers=AUTH).json()["points"]
        assert [p["step"] for p in points if p["kind"] == "train"] == [1, 2]  # each step once, across attempts
    assert len((_run_root(tmp_path, job_id) / "starts").read_text().splitlines()) == 2
    # The stand-in skips a stage only on its marker and trains on after its newest checkpoint, as the
    # trainer does: so the relaunch ran in the first attempt's run directory and resumed from it.
    first, second = _attempts(_run_root(tmp_path, job_id))
    assert [e.step for e in first if e.type == "train_step"] == [1]
    assert not any(e.type == "stage_started" and e.stage == "convert" for e in second)
    convert = [e for e in second if e.type == "stage_finished" and e.stage == "convert"]
    assert len(convert) == 1 and convert[0].skipped and convert[0].reason == "completed by an earlier attempt"
    assert [e.step for e in second if e.type == "train_step"] == [2]
