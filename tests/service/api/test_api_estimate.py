"""POST /v1/jobs?dry_run=estimate and the estimate kept on a job: through the real app and store (fake launcher),
and through `rljob` against a live service (local launcher, the stand-in trainer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api, RunCli
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body, wait_for_phase, wait_until

V6E1 = {"accelerator": "v6e-1", "chips_per_vm": 1, "rollout_engine": "vllm", "rollout_tensor_parallelism": -1}


def _estimate(api: Api, body: dict[str, Any]) -> Any:
    return api.client.post("/v1/jobs", params={"dry_run": "estimate"}, json=body, headers=api.as_(TOKEN_A))


def _succeed(api: Api, job_id: str) -> None:
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.launcher.emit(job_id, ObservedState.SUCCEEDED, exit_code=0)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.SUCCEEDED)


def test_a_dry_run_estimate_creates_nothing_and_is_refused_exactly_as_a_submit(api: Api, tmp_path: Path) -> None:
    answer = _estimate(api, spec_body(tmp_path))
    assert answer.status_code == 200, answer.text
    estimate = answer.json()
    assert estimate["basis"] == "formula" and estimate["basis_detail"].startswith("formula")
    assert estimate["wall_s"]["low"] <= estimate["wall_s"]["expected"] <= estimate["wall_s"]["high"]
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0 and api.launcher.launched == []
    # The same 422s as a submit: a schema error, a team not the token's, a job that does not fit its accelerator.
    llama8b_on_one_v6e = {**spec_body(tmp_path), "model": {"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B"}, "hardware": V6E1}
    for body in (spec_body(tmp_path, grpo={"batch_size": 0}), spec_body(tmp_path, team="team-b"), llama8b_on_one_v6e):
        submitted = api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A))
        estimated = _estimate(api, body)
        assert submitted.status_code == estimated.status_code == 422, (submitted.text, estimated.text)
        assert estimated.json() == submitted.json()
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0


def test_a_job_keeps_its_estimate_and_shows_its_actuals_beside_it_once_ended(api: Api, tmp_path: Path) -> None:
    first = api.submit(spec_body(tmp_path, name="first"))
    assert first["estimate"]["basis"] == "formula" and first["estimate_actuals"] is None  # not ended yet
    _succeed(api, first["id"])
    ended = api.client.get(f"/v1/jobs/{first['id']}", headers=api.as_(TOKEN_A)).json()
    assert ended["estimate"] == first["estimate"]  # the estimate made at submit, unchanged
    actuals = ended["estimate_actuals"]
    assert actuals["wall_s"]["actual"] == pytest.approx(actuals["wait_s"]["actual"] + actuals["run_s"]["actual"], abs=2e-3)
    assert actuals["wall_s"]["expected"] == first["estimate"]["wall_s"]["expected"] and actuals["wall_s"]["within"] in (True, False)
    assert actuals["chip_hours"] == {"actual": 0.0, "expected": 0.0, "within": True}  # a cpu job holds no chips
    second = api.submit(spec_body(tmp_path, name="second"))
    _succeed(api, second["id"])
    # Two finished jobs of the same shape: the next estimate learns from them, and names them.
    estimate = _estimate(api, spec_body(tmp_path, name="third")).json()
    assert estimate["basis"] == "history" and estimate["history_job_ids"] == [second["id"], first["id"]]
    assert "2 finished jobs" in estimate["basis_detail"]
    # Another team has no finished job of its own: its estimate is the formula, and names no job of team-a.
    other = api.client.post("/v1/jobs", params={"dry_run": "estimate"}, json=spec_body(tmp_path), headers=api.as_(TOKEN_B)).json()
    assert other["basis"] == "formula" and other["history_job_ids"] == []


def _write_spec(tmp_path: Path, name: str = "spec", **labels: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec_body(tmp_path, labels={"fake-steps": "1", **labels})))
    return path


def test_the_cli_prints_an_estimate_and_an_ended_jobs_estimate_beside_its_actuals(run_cli: RunCli, tmp_path: Path) -> None:
    spec = _write_spec(tmp_path)
    formula = run_cli("submit", str(spec), "--estimate")
    assert formula.exit_code == 0, formula.output
    assert "formula" in formula.output and "nothing submitted" in formula.output
    assert json.loads(run_cli("list", "-o", "json").stdout)["count"] == 0
    ids = []
    for _ in range(2):
        done = run_cli("submit", str(spec), "--follow")
        assert done.exit_code == 0, done.output
        ids.append(done.output.split("submitted ")[1].split()[0])
    estimate = json.loads(run_cli("submit", str(spec), "--estimate", "-o", "json").stdout)
    assert estimate["basis"] == "history" and estimate["history_job_ids"] == ids[::-1]
    shown = run_cli("status", ids[1])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "estimate vs actual" in text and "wall" in text and ("(inside)" in text or "(outside)" in text)
    bad = run_cli("submit", str(tmp_path / "missing.yaml"), "--estimate")
    assert bad.exit_code != 0 and "Traceback" not in bad.output


def test_the_place_in_line_comes_from_the_local_launchers_team_queue(run_cli: RunCli, tmp_path: Path) -> None:
    """The local launcher runs two jobs at once (RLJOB_MAX_CONCURRENT_JOBS): a job would start at once while a slot
    is free, and waits first in line once both hold a gated job."""
    spec = _write_spec(tmp_path)
    estimate = json.loads(run_cli("submit", str(spec), "--estimate", "-o", "json").stdout)
    assert estimate["queue_position"] == 0 and estimate["wait_s"] == {"expected": 0.0, "low": 0.0, "high": 0.0}
    gated = _write_spec(tmp_path, "gated", **{"fake-gate": "true"})
    held = [json.loads(run_cli("submit", str(gated), "-o", "json").stdout)["id"] for _ in range(2)]
    try:
        wait_until(lambda: all((tmp_path / "runs" / job_id / "starts").exists() for job_id in held))
        estimate = json.loads(run_cli("submit", str(spec), "--estimate", "-o", "json").stdout)
        assert estimate["queue_position"] == 1
    finally:  # open the gates: the stand-in trainers end by themselves, failed assertion or not
        for job_id in held:
            (tmp_path / "runs" / job_id / "gate").parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "runs" / job_id / "gate").touch()
        wait_until(lambda: all("SUCCEEDED" in run_cli("status", job_id).output for job_id in held))
