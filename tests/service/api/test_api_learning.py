"""Whether a job is learning, over HTTP: GET /v1/jobs/{id}/samples against real samples files in the
run directory (written with the trainer contract's StepSamples), JobPublic.health, and `health`
entries on the job's SSE stream. Real app and store; fakes only at the launcher/progress ports."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.adapters import run_files
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.api.test_api_sse import read_sse
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, TOKEN_ADMIN, TOKEN_B, spec_body, wait_for_phase, wait_until
from trainer.contract import SIGNAL_METRIC, RunLayout, Sample, Stage, StageStarted, StepSamples, TrainStep


def write_samples(layout: RunLayout, step: int, completion: str = "", **overrides: object) -> StepSamples:
    """A samples file as the trainer writes it (one JSON object per step)."""
    samples = StepSamples(
        step=step,
        time=datetime.now(UTC),
        num_generations=2,
        groups=2,
        groups_with_signal=1,
        completions=4,
        samples=[
            Sample(
                group=0,
                prompt="Q: 2+2?",
                completion=completion or f"step {step}: <answer>4</answer>",
                rewards={"exact_answer": 1.0, "format_match": 0.5},
                total=1.5,
            ),
            Sample(group=0, prompt="Q: 2+2?", completion="five", rewards={"exact_answer": 0.0, "format_match": None}, total=0.0),
        ],
        **overrides,
    )
    path = Path(layout.samples_file(step))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(samples.model_dump_json())
    return samples


def _job(api: Api, tmp_path: Path) -> tuple[str, RunLayout]:
    job_id = api.submit(spec_body(tmp_path))["id"]
    return job_id, RunLayout(str(tmp_path / "runs"), job_id)


def _samples(api: Api, job_id: str, token: str = TOKEN_A, **params: object):
    return api.client.get(f"/v1/jobs/{job_id}/samples", params=params, headers=api.as_(token))


def test_latest_and_by_step(api: Api, tmp_path: Path) -> None:
    job_id, layout = _job(api, tmp_path)
    for step in (1, 2, 3, 5):
        write_samples(layout, step)
    Path(layout.samples_dir, "notes.txt").write_text("not a samples file")  # ignored

    latest = _samples(api, job_id)
    assert latest.status_code == 200, latest.text
    body = latest.json()
    assert (body["job_id"], body["step"], body["steps_available"]) == (job_id, 5, [1, 2, 3, 5])
    assert body["samples"]["samples"][0]["completion"] == "step 5: <answer>4</answer>"
    assert body["samples"]["samples"][0]["rewards"] == {"exact_answer": 1.0, "format_match": 0.5}
    assert body["samples"]["samples"][1]["rewards"]["format_match"] is None

    second = _samples(api, job_id, step=2).json()
    assert second["step"] == 2 and second["samples"]["samples"][0]["completion"].startswith("step 2:")
    assert second["steps_available"] == [1, 2, 3, 5]
    assert _samples(api, job_id, token=TOKEN_ADMIN, step=1).status_code == 200  # admins see every team


def test_404s_say_why(api: Api, tmp_path: Path) -> None:
    job_id, layout = _job(api, tmp_path)
    none_yet = _samples(api, job_id)
    assert none_yet.status_code == 404 and "no samples yet" in none_yet.json()["detail"]
    for step in (1, 2, 3, 7):
        write_samples(layout, step)
    missing = _samples(api, job_id, step=4)
    assert missing.status_code == 404
    assert missing.json()["detail"].endswith("no samples for step 4; steps with samples: 1-3, 7")
    for bad in (0, -1, 10**9 + 1, "latest"):
        assert _samples(api, job_id, step=bad).status_code == 422


def test_another_team_cannot_see_them(api: Api, tmp_path: Path) -> None:
    job_id, layout = _job(api, tmp_path)
    write_samples(layout, 1)
    other = _samples(api, job_id, token=TOKEN_B)
    assert other.status_code == 404 and "completion" not in other.text
    assert other.json() == api.client.get("/v1/jobs/rl-000000000000/samples", headers=api.as_(TOKEN_B)).json() | {
        "detail": f"no job {job_id!r} visible to your team"
    }


def test_a_corrupt_file_is_a_clear_404_and_an_oversized_one_a_409_not_a_500(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    job_id, layout = _job(api, tmp_path)
    write_samples(layout, 1)
    Path(layout.samples_file(2)).write_text('{"step": 2, "samples": [')  # cut short
    Path(layout.samples_file(3)).write_text(write_samples(layout, 4).model_dump_json())  # step 4's data as step 3
    Path(layout.samples_file(5)).mkdir()  # not even a file: not listed, and refused (tests/service/adapters/test_run_dir_untrusted.py)
    with caplog.at_level(logging.WARNING, logger="service.adapters.run_files"):
        for step in (2, 3):
            answer = _samples(api, job_id, step=step)
            assert answer.status_code == 404, (step, answer.text)
            assert f"at step {step} cannot be read" in answer.json()["detail"]
        directory = _samples(api, job_id, step=5)
        latest = _samples(api, job_id)
    assert directory.status_code == 409
    refused = "the run directory's samples/train-000005.json is not a regular file (a directory): it is not served"
    assert directory.json()["detail"] == refused
    assert latest.status_code == 200 and latest.json()["step"] == 4
    assert "is not a samples file" in caplog.text and "holds step 4, not 3" in caplog.text

    monkeypatch.setattr(run_files, "MAX_SAMPLES_BYTES", 100)  # every real file is now too large: never read whole
    too_big = _samples(api, job_id, step=1)
    assert too_big.status_code == 409 and "samples file for step 1 is over" in too_big.json()["detail"]


def test_health_is_in_the_job_and_its_changes_are_on_the_stream(api: Api, tmp_path: Path) -> None:
    job_id, _ = _job(api, tmp_path)
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    assert api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()["health"] is None

    def event(cls: type, seq: int, **fields: object):
        return cls(seq=seq, time=datetime.now(UTC), job_id=job_id, **fields)

    def drive() -> None:
        api.progress.add(event(StageStarted, 0, stage=Stage.TRAIN))
        api.progress.add(event(TrainStep, 1, step=1, total_steps=9, loss=0.5, kl=0.1, metrics={SIGNAL_METRIC: 0.5}))
        wait_until(lambda: api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()["health"] is not None)
        api.progress.add(event(TrainStep, 2, step=2, total_steps=9, loss=None, kl=0.1, nonfinite=["loss"]))
        wait_until(lambda: api.store.get(job_id).health_verdict == "diverging")  # type: ignore[union-attr]
        api.launcher.emit(job_id, ObservedState.FAILED, exit_code=70)

    driver = threading.Thread(target=drive, daemon=True)
    events = read_sse(api, f"/v1/jobs/{job_id}/events", on_event=lambda seen: len(seen) == 1 and driver.start())
    driver.join(timeout=20)
    health = [(d["data"]["verdict"], d["data"]["step"]) for kind, _, d in events if kind == "health"]
    assert health == [("signal", 1), ("diverging", 2)]
    job = api.client.get(f"/v1/jobs/{job_id}", headers=api.as_(TOKEN_A)).json()
    assert job["phase"] == "FAILED" and job["health"]["verdict"] == "diverging"
    assert "the loss is NaN or infinite at step 2" in job["health"]["message"]
    listed = api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["data"]
    assert [j["health"]["verdict"] for j in listed] == ["diverging"]
