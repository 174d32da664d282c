"""GET /v1/jobs/{id}/repro: the record the trainer wrote (trainer/repro.py), read through run_reads.py like every
file a job writes. Real app, real store, real files; fakes only at the launcher/progress ports."""

from __future__ import annotations

import os
from pathlib import Path

from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, TOKEN_B, spec_body
from trainer.contract import JobSpec, RunLayout
from trainer.repro import IMAGE_ENV, write_repro


def _job_with_repro(api: Api, tmp_path: Path) -> tuple[str, RunLayout]:
    job = api.submit(spec_body(tmp_path))
    spec = JobSpec.model_validate(job["spec"])
    layout = RunLayout(spec.output, str(job["id"]))
    write_repro(spec, layout, {IMAGE_ENV: "example/trainer:1"})
    return str(job["id"]), layout


def test_the_record_is_served_to_the_jobs_team(api: Api, tmp_path: Path) -> None:
    job_id, _ = _job_with_repro(api, tmp_path)
    response = api.client.get(f"/v1/jobs/{job_id}/repro", headers=api.as_(TOKEN_A))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["job_id"] == job_id and body["image"]["reference"] == "example/trainer:1"
    assert body["spec"]["grpo"]["learning_rate"] == 3e-6 and body["schema_version"] == 1
    assert api.client.get(f"/v1/jobs/{job_id}/repro", headers=api.as_(TOKEN_B)).status_code == 404


def test_before_the_trainer_wrote_it_the_answer_is_404_saying_why(api: Api, tmp_path: Path) -> None:
    job_id = api.submit(spec_body(tmp_path))["id"]
    response = api.client.get(f"/v1/jobs/{job_id}/repro", headers=api.as_(TOKEN_A))
    assert response.status_code == 404 and "has no repro record yet" in response.text


def test_a_linked_or_foreign_record_is_not_served(api: Api, tmp_path: Path) -> None:
    job_id, layout = _job_with_repro(api, tmp_path)
    secret = tmp_path / "client.yaml"
    secret.write_text("token: admin-secret")
    os.unlink(layout.repro)
    os.symlink(secret, layout.repro)
    response = api.client.get(f"/v1/jobs/{job_id}/repro", headers=api.as_(TOKEN_A))
    assert response.status_code == 409 and "admin-secret" not in response.text
    os.unlink(layout.repro)
    other = RunLayout(layout.output, "rl-000000000000")
    write_repro(JobSpec.model_validate(api.submit(spec_body(tmp_path, name="other"))["spec"]), other)
    os.rename(other.repro, layout.repro)  # another job's record in this job's run directory
    assert api.client.get(f"/v1/jobs/{job_id}/repro", headers=api.as_(TOKEN_A)).status_code == 404
