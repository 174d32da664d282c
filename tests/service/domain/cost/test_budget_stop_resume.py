"""The budget's Done-when through the service: the real app, the real local launcher running the stand-in trainer
(harness/fake_trainer.py) as a TPU job. A v6e-8 job can run here because the launcher's host-TPU seam (host_tpu.py,
`probe_tpu`) is told this machine is a v6e-8 VM; the stand-in, with fake-stop-checkpoints, saves no checkpoint of its
own and saves one only on SIGTERM, at the step it reached, then exits 75, as train_rl does (trainer/run_stop.py).

The job crosses its team's chip-hour budget while it runs (8 chips bill 1.8 s for 0.004 chip-hours): the leader's
budget loop holds it and stops it, it checkpoints at step 2 and goes QUEUED (BudgetExhausted). The service is stopped
and started again with a larger budget: the job is released, resumes from that checkpoint (steps 3 and 4 only, no
resume spent) and finishes. About 5 s."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.adapters.local import LocalProcessLauncher
from service.adapters.local.host_tpu import HostTpu
from service.app import create_app
from service.config import Settings
from service.domain.records.phases import JobPhase
from tests.service.domain.cost.test_budget_holds import FixedEstimate
from tests.service.service_helpers import TOKEN_A, spec_body, wait_for_phase, wait_until
from trainer.contract import RunLayout

A = {"Authorization": f"Bearer {TOKEN_A}"}
V6E8_VM = HostTpu(8, "v6e-8", "the test")


@contextmanager
def running_service(settings: Settings, trainer: list[str]) -> Iterator[TestClient]:
    launcher = LocalProcessLauncher(
        Path(settings.state_dir) / "local-jobs", trainer, poll_interval_s=0.05, cancel_grace_s=10, probe_tpu=lambda: V6E8_VM
    )
    app = create_app(settings, launcher=launcher)
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        app.state.runtime.jobs.estimator = FixedEstimate(0.001)  # the estimate is not what this test is about
        yield client


def _job(client: TestClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", headers=A).json()
    return job


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


def test_a_job_that_crosses_its_budget_stops_with_a_checkpoint_and_resumes_from_it_after_a_raise(
    settings_factory: Callable[..., Settings], fake_trainer_command: list[str], tmp_path: Path
) -> None:
    def settings(chip_hours: float) -> Settings:
        budgets = json.dumps({"team-a": {"chip_hours": chip_hours}})
        return settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a", team_budgets=budgets, budget_check_interval_s=0.1)

    labels = {"fake-gate": "true", "fake-gate-step": "2", "fake-steps": "4", "fake-stop-checkpoints": "true"}
    body = spec_body(tmp_path, labels=labels, hardware={"accelerator": "v6e-8", "rollout_engine": "jax"})
    with running_service(settings(0.004), fake_trainer_command) as client:
        response = client.post("/v1/jobs", json=body, headers=A)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        run = tmp_path / "runs" / job_id
        wait_for_phase(lambda: _job(client, job_id)["phase"], JobPhase.RUNNING)
        wait_for_phase(lambda: _job(client, job_id)["phase"], JobPhase.QUEUED, timeout_s=30)
        held = _job(client, job_id)
        assert held["queue"]["reason"] == "BudgetExhausted" and held["hold"]["reason"] == "budget"
        assert "chip-hour budget" in held["message"] and "raises RLJOB_TEAM_BUDGETS" in held["message"]
        assert held["usage"]["billed_chip_hours"] >= 0.004
        assert [p.name for p in Path(RunLayout(str(tmp_path / "runs"), job_id).actor_checkpoints).iterdir()] == [
            "2"
        ]  # the stop's checkpoint, only
        finished = [e for e in _events(run) if e["type"] == "run_finished"]
        assert [(e["ok"], e["exit_code"]) for e in finished] == [(False, 75)]
        # A team over its budget: the next TPU job is refused, and nothing is stored.
        refused = client.post("/v1/jobs", json={**body, "name": "second"}, headers=A)
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "budget", "chip_hours"]
        assert [j["id"] for j in client.get("/v1/jobs", headers=A).json()["data"]] == [job_id]
        budgets = client.get("/v1/usage", headers=A).json()["budgets"]
        assert budgets[0]["team"] == "team-a" and budgets[0]["exhausted"] == ["chip_hours"] and budgets[0]["held_jobs"] == [job_id]

    with running_service(settings(1.0), fake_trainer_command) as client:
        wait_for_phase(lambda: _job(client, job_id)["phase"], JobPhase.SUCCEEDED, timeout_s=30)
        done = _job(client, job_id)
        assert done["hold"] is None and done["attempt"] == 2
        assert done["spec"]["name"] == "job-one" and done["message"] == "finished successfully"
    events = _events(run)
    second_start = max(i for i, e in enumerate(events) if e["type"] == "run_started")
    assert [e["step"] for e in events[:second_start] if e["type"] == "train_step"] == [1, 2]
    assert [e["step"] for e in events[second_start:] if e["type"] == "train_step"] == [3, 4]  # from step 2's checkpoint
    assert len((run / "starts").read_text().splitlines()) == 2
