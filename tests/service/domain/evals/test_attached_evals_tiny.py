"""Issue 36's Done-when on the local launcher: a tiny training job with evaluations attached, submitted over HTTP to
the service with the real trainer; eval jobs run on its base model, a checkpoint and its export, each SUCCEEDED with
its report, and the training job's view shows each with its interval and the difference from the base eval.

Slow (MaxText on CPU): lane slow-lane-1 (tests/lanes.py), after the tiny job's own test, whose conversion it takes
from the lane's shared output (`tiny_output`). Kept small: 2 train steps, a checkpoint each, every 2nd evaluated
(step-2), a suite of the tiny data's 8 test rows with k=2 samples of 16 tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import wait_for_phase, wait_until
from tests.service.tiny_service import AUTH, TINY_WAIT_S, embedded_settings, offline, tiny_body


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_eval_jobs_run_on_the_base_a_checkpoint_and_the_export_and_the_job_shows_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_dir: Path, tiny_output: Path
) -> None:
    body = tiny_body(tiny_dir, tiny_output)
    body["name"] = "tiny-attached-evals"
    body["grpo"] |= {"num_batches": 2, "checkpoint_period": 1, "num_test_batches": 0}  # checkpoints at steps 1 and 2
    body["dataset"].pop("eval_files")
    body["eval"] = {
        "suite": {
            "name": "tiny-length",
            "data": str(tiny_dir / "data" / "test.parquet"),
            "rewards_path": str(tiny_dir / "length_reward.py"),
            "rewards": ["completion_length_reward"],
            "sampling": {"samples": 2, "max_new_tokens": 16},
        },
        "every_n_checkpoints": 2,  # the 2nd checkpoint (step 2), not the 1st
    }
    offline(monkeypatch)
    settings = embedded_settings(tmp_path)
    auth = AUTH
    with TestClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        submitted = client.post("/v1/jobs", json=body, headers=auth)
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]

        def job() -> dict:
            return client.get(f"/v1/jobs/{job_id}", headers=auth).json()

        def show_logs(ids: list[str]) -> None:
            for shown in ids:
                print(f"---- {shown}", client.get(f"/v1/jobs/{shown}/logs", params={"tail_lines": 60}, headers=auth).text)

        try:
            wait_for_phase(lambda: job()["phase"], JobPhase.SUCCEEDED, timeout_s=TINY_WAIT_S)

            def all_ended() -> bool:
                evals = job()["attached_evals"]
                return [e["label"] for e in evals] == ["base", "step-2", "export"] and all(
                    e["phase"] in ("SUCCEEDED", "FAILED", "CANCELLED") and (e["label"] == "base" or e["vs_base"] or e["note"])
                    for e in evals
                )

            wait_until(all_ended, timeout_s=TINY_WAIT_S, interval_s=1.0)
        except AssertionError:
            show_logs([job_id, *(e["eval_id"] for e in job()["attached_evals"] if e["eval_id"])])
            print(job()["attached_evals"])
            raise
        evals = {e["label"]: e for e in job()["attached_evals"]}
        for label, entry in evals.items():
            assert entry["phase"] == "SUCCEEDED", (label, entry)
            eval_job = client.get(f"/v1/jobs/{entry['eval_id']}", headers=auth).json()
            assert eval_job["labels"]["rljob.dev/eval-of"] == job_id
            assert eval_job["spec"]["evaluation"]["checkpoint"]["job_id"] == job_id
            assert eval_job["spec"]["evaluation"]["checkpoint"]["label"] == label
            assert eval_job["spec"]["hardware"]["accelerator"] == "cpu"
            report = eval_job["eval_job"]
            assert report["n"] == 8 and report["k"] == 2 and report["primary"] == "completion_length_reward", report
            # Each with its interval, on one suite version.
            scores = entry["scores"]
            assert entry["function"] == "completion_length_reward" and entry["suite_version"] == evals["base"]["suite_version"]
            for name in ("pass@1", "sampled", "pass@k", "maj@k"):
                low, high = scores[name]["ci95"]
                assert 0 <= low <= scores[name]["value"] <= high <= 1, (label, name, scores[name])
        assert evals["step-2"]["step"] == 2
        assert evals["step-2"]["eval_id"] != evals["export"]["eval_id"]
        step_checkpoint = client.get(f"/v1/jobs/{evals['step-2']['eval_id']}", headers=auth).json()["spec"]["evaluation"]["checkpoint"]
        assert step_checkpoint["format"] == "maxtext" and step_checkpoint["params"].endswith("/checkpoints/actor/2/model_params")
        # The difference from the base, paired over the 8 rows, with its interval and McNemar's p.
        for label in ("step-2", "export"):
            comparison = evals[label]["vs_base"]
            assert comparison is not None and comparison["n"] == 8, (label, evals[label])
            pass1 = next(s for s in comparison["scores"] if s["score"] == "pass@1")
            low, high = pass1["ci95"]
            assert low <= pass1["difference"] <= high and 0 <= pass1["mcnemar_p"] <= 1, pass1
        assert "base" in evals and evals["base"]["vs_base"] is None
