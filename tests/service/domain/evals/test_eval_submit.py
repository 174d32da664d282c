"""POST /v1/evals: what an eval job is made of (its spec from the checkpoint reference), the 422s that name the field
and why (bad checkpoint references and locations, bad suites, a baseline that is no eval), idempotency, and that an
eval job is a job (GET /v1/jobs shows its evaluation, the jobs endpoint cancels it, GET /v1/evals lists it)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.api.routes.evals import EVAL_RUNS_DIR
from service.domain.evals.eval_jobs import EvalCreate, build_eval_spec
from service.domain.records.errors import InvalidRequest
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api
from tests.service.eval_runs import submit_eval
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body, wait_for_phase
from trainer.contract import ArtifactWritten, RunLayout


def _refused(api: Api, body: dict[str, object], token: str = TOKEN_A) -> tuple[list[str | int], str]:
    response = api.client.post("/v1/evals", json=body, headers=api.as_(token))
    assert response.status_code == 422, response.text
    problem = response.json()["detail"][0]
    return problem["loc"], problem["msg"]


def _succeeded_with_export(api: Api, tmp_path: Path, name: str = "trained") -> str:
    job_id = api.submit(spec_body(tmp_path, name=name))["id"]
    layout = RunLayout(str(tmp_path / "runs"), job_id)
    api.progress.add(ArtifactWritten(seq=0, time=datetime.now(UTC), job_id=job_id, name="export.export", uri=layout.export_dir))
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.launcher.emit(job_id, ObservedState.SUCCEEDED)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.SUCCEEDED)
    return job_id


def test_an_export_reference_becomes_a_cpu_eval_job_of_the_jobs_export(api: Api, tmp_path: Path) -> None:
    trained = _succeeded_with_export(api, tmp_path)
    made = submit_eval(api, {"checkpoint": f"{trained}:export", "suite": {"name": "gsm8k"}, "labels": {"team-run": "x"}})
    job = api.client.get(f"/v1/jobs/{made['id']}", headers=api.as_(TOKEN_A)).json()
    spec = job["spec"]
    assert spec["name"] == "eval-gsm8k-export" and spec["team"] == "team-a" and spec["labels"] == {"team-run": "x"}
    assert spec["hardware"]["accelerator"] == "cpu" and spec["export"]["enabled"] is False
    assert spec["output"] == str(tmp_path / "runs")  # the referenced job's
    assert spec["model"]["source"] == RunLayout(str(tmp_path / "runs"), trained).export_dir
    assert job["eval_job"]["checkpoint"] == {"format": "huggingface", "params": None, "job_id": trained, "label": "export"}
    assert job["eval_job"]["suite"]["scope"] == "builtin" and job["eval_job"]["suite"]["version"] is None
    base = submit_eval(api, {"checkpoint": f"{trained}:base", "suite": {"name": "gsm8k"}})
    assert base["eval_job"]["model_source"] == "/models/tiny" and base["eval_job"]["checkpoint"]["label"] == "base"

    listed = api.client.get("/v1/evals", params={"job_of": trained}, headers=api.as_(TOKEN_A)).json()
    assert [e["id"] for e in listed["data"]] == [base["id"], made["id"]]  # newest first; the training job is no eval
    assert api.client.get("/v1/evals", params={"suite": "arith"}, headers=api.as_(TOKEN_A)).json()["count"] == 0
    assert api.client.get("/v1/evals", headers=api.as_(TOKEN_B)).json()["count"] == 0
    assert api.client.get(f"/v1/evals/{trained}", headers=api.as_(TOKEN_A)).status_code == 404  # a job, not an eval

    cancelled = api.client.post(f"/v1/jobs/{made['id']}/cancel", headers=api.as_(TOKEN_A))
    assert cancelled.status_code == 200 and cancelled.json()["phase"] in ("CANCELLING", "CANCELLED")


BAD_CHECKPOINTS = [
    ("{job}:latest", "'latest' is not a checkpoint of a job"),
    ("{job}:step-x", "'step-x' is not a checkpoint of a job"),
    ("{job}", "name which checkpoint of"),
    ("rl-000000000000:export", "no job rl-000000000000 visible to your team"),
    ("{other}:base", "visible to your team"),  # another team's job looks like a missing one
    ("{job}:last", "has reported no actor checkpoint yet"),
    ("{job}:best", "has no best-checkpoint record"),
    ("{running}:export", "has no export yet (it is LAUNCHING)"),
    ("{eval}:base", "is an eval job"),
    ("relative/../dir/", "nor a Hugging Face checkpoint location"),
    ("models/tiny model", "nor a Hugging Face checkpoint location"),
]
BAD_SUITES = [
    ({"name": "arith", "data": "/d/rows.jsonl"}, ["body", "suite"], "arith is a built-in suite"),
    ({"name": "mine"}, ["body", "suite"], "a user suite needs its rows in `data`"),
    ({"name": "mine", "data": "/d/rows.jsonl"}, ["body", "suite"], "needs rewards_path"),
    ({"name": "mine", "data": "/d/rows.csv", "rewards_path": "/d/r.py", "rewards": ["f"]}, ["body", "suite", "data"], ".jsonl or .parquet"),
    ({"name": "Not A Label"}, ["body", "suite", "name"], "DNS-1123"),
    ({"name": "arith", "sampling": {"samples": 0}}, ["body", "suite", "sampling", "samples"], "greater than or equal to 1"),
    ({"name": "arith", "sampling": {"samples": "4"}}, ["body", "suite", "sampling", "samples"], "valid integer"),
]


def test_a_checkpoint_that_names_no_checkpoint_or_a_bad_suite_is_a_422_saying_why(api: Api, tmp_path: Path) -> None:
    job = _succeeded_with_export(api, tmp_path)
    running = api.submit(spec_body(tmp_path, name="running"))["id"]
    other = api.submit(spec_body(tmp_path, name="theirs"), token=TOKEN_B)["id"]
    an_eval = submit_eval(api, {"checkpoint": f"{job}:base", "suite": {"name": "arith"}})["id"]
    for checkpoint, why in BAD_CHECKPOINTS:
        text = checkpoint.format(job=job, running=running, other=other, eval=an_eval)
        loc, message = _refused(api, {"checkpoint": text, "suite": {"name": "arith"}})
        assert loc == ["body", "checkpoint"] and why in message, (checkpoint, message)
    for suite, where, why in BAD_SUITES:
        loc, message = _refused(api, {"checkpoint": "/models/tiny", "suite": suite, "output": "/tmp/runs"})
        assert loc[: len(where)] == where and why in message, (suite, loc, message)
    assert api.client.get("/v1/evals", headers=api.as_(TOKEN_A)).json()["count"] == 1  # nothing refused was stored


def test_a_location_without_output_goes_under_the_state_dir_on_the_embedded_default_and_is_refused_elsewhere(
    api: Api, tmp_path: Path
) -> None:
    made = submit_eval(api, {"checkpoint": "/models/tiny", "suite": {"name": "arith"}})  # the local launcher's service
    spec = api.client.get(f"/v1/jobs/{made['id']}", headers=api.as_(TOKEN_A)).json()["spec"]
    assert spec["output"] == str((tmp_path / "state" / EVAL_RUNS_DIR).resolve())
    body = EvalCreate.model_validate({"checkpoint": "/models/tiny", "suite": {"name": "arith"}})
    with pytest.raises(InvalidRequest) as refused:  # a cluster's service passes no default: no place is every team's
        build_eval_spec(body, lambda job_id: pytest.fail("no job is looked up"), None, default_output=None)
    assert refused.value.loc == ("body", "output") and "needs `output`" in str(refused.value)


def test_other_fields_are_422s_naming_them(api: Api, tmp_path: Path) -> None:
    job = _succeeded_with_export(api, tmp_path)
    loc, message = _refused(api, {"checkpoint": f"{job}:base", "suite": {"name": "arith"}, "baseline": job})
    assert loc == ["body", "baseline"] and "is not an eval job" in message
    gsm = submit_eval(api, {"checkpoint": f"{job}:base", "suite": {"name": "gsm8k"}})["id"]
    loc, message = _refused(api, {"checkpoint": f"{job}:export", "suite": {"name": "arith"}, "baseline": gsm})
    assert loc == ["body", "baseline"] and "evaluated suite gsm8k, not arith" in message
    loc, message = _refused(api, {"checkpoint": f"{job}:base", "suite": {"name": "arith"}, "labels": {"Bad Key": "v"}})
    assert loc == ["body", "labels"] and "not a valid Kubernetes label" in message


def test_a_repeated_idempotency_key_returns_the_same_eval_and_another_body_is_a_409(api: Api, tmp_path: Path) -> None:
    job = _succeeded_with_export(api, tmp_path)
    body = {"checkpoint": f"{job}:export", "suite": {"name": "arith"}}
    first = api.client.post("/v1/evals", json=body, headers={**api.as_(TOKEN_A), "Idempotency-Key": "eval-1"})
    again = api.client.post("/v1/evals", json=body, headers={**api.as_(TOKEN_A), "Idempotency-Key": "eval-1"})
    assert (first.status_code, again.status_code) == (201, 200) and first.json()["id"] == again.json()["id"]
    other = api.client.post(
        "/v1/evals", json={**body, "suite": {"name": "arith-a"}}, headers={**api.as_(TOKEN_A), "Idempotency-Key": "eval-1"}
    )
    assert other.status_code == 409 and first.json()["id"] in other.json()["detail"]
    assert api.client.get("/v1/evals", headers=api.as_(TOKEN_A)).json()["count"] == 1
    # Counted as job submits are (api/routes/jobs.py counted_submit): the job's own submit, this eval, the replay, the 409.
    counted = api.client.get("/metrics").text
    for outcome, n in (("created", 2), ("replayed", 1), ("error", 1)):
        assert f'rljob_job_submissions_total{{outcome="{outcome}"}} {n}.0' in counted, outcome
