"""Issue 39's Done-when for Qwen3: a tiny random Qwen3 dense job (`trainer make-tiny --family qwen3`) submitted over
HTTP to the service with the local launcher runs convert, one GRPO step (the jax rollout engine) and export on CPU,
and its export loads in transformers and matches MaxText's logits on the trained weights.

One job, as short as it goes (one train step, no evaluation), so one slow test covers the whole path. Slow (MaxText
on CPU): CI runs it with `-m slow` in a lane of tests/lanes.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import wait_for_phase, wait_until
from tests.service.tiny_service import AUTH, REPO, TINY_WAIT_S, embedded_settings, offline, tiny_body
from trainer.contract import RunLayout, Stage

PARITY_CHECK = REPO / "tests" / "trainer" / "export_parity_check.py"
WAIT_S = TINY_WAIT_S


@pytest.mark.slow
@pytest.mark.timeout(2400)  # make-tiny (up to 600 s) and the job (WAIT_S) end with their own messages first
def test_a_tiny_qwen3_job_converts_trains_and_exports_through_the_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    from trainer.sizing.hf_model import resolve_maxtext_model
    from trainer.stages.context import latest_actor_step
    from trainer.stages.export import actor_params_uri

    tiny, output = tmp_path / "tiny-qwen3", tmp_path / "runs"
    offline(monkeypatch)
    subprocess.run(
        [sys.executable, "-m", "trainer", "make-tiny", "--family", "qwen3", "--out", str(tiny)], cwd=REPO, check=True, timeout=600
    )
    body = tiny_body(tiny, output)
    body["name"] = "tiny-qwen3"
    body["grpo"] |= {"num_batches": 1, "num_test_batches": 0}  # one step, no evaluation
    body["dataset"].pop("eval_files")
    settings = embedded_settings(tmp_path)
    auth = AUTH
    with TestClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        response = client.post("/v1/jobs", json=body, headers=auth)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        assert response.json()["fit_estimate"]["model_source"] == "config.json"  # the Qwen3 shape, read at submit
        try:
            wait_for_phase(lambda: client.get(f"/v1/jobs/{job_id}", headers=auth).json()["phase"], JobPhase.SUCCEEDED, timeout_s=WAIT_S)
        except AssertionError:
            print(client.get(f"/v1/jobs/{job_id}/logs", params={"tail_lines": 80}, headers=auth).text)
            raise
        job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["step"] == job["total_steps"] == 1 and job["metrics"]["reward_mean"] is not None
    assert {"convert", "train", "export"} <= set(job["stage_times"]), job["stage_times"]

    layout = RunLayout(str(output), job_id)
    export = Path(layout.export_dir)
    # The export stage's own check loaded it with transformers and found finite logits (trainer/checks/verify_export.py).
    assert json.loads(Path(layout.stage_marker(Stage.EXPORT)).read_text())["outputs"]["verified"] is True
    config = json.loads((export / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["tie_word_embeddings"] is True
    assert config["rope_parameters"]["rope_theta"] == 5_000_000 and config["head_dim"] == 16  # the checkpoint's, not the table's
    # The export holds the trained weights: the GRPO step moved them away from the tiny model's.
    original, exported = load_file(str(tiny / "model" / "model.safetensors")), load_file(str(export / "model.safetensors"))
    assert sorted(original) == sorted(exported) and "lm_head.weight" not in exported  # tied: no separate head
    assert any(not (original[name].float() == exported[name].float()).all() for name in original)

    # MaxText's forward on the actor's last checkpoint against transformers' on the export (fp32), within the Llama
    # round trip's tolerance (tests/trainer/test_slow_pipeline.py). MaxText 0.2.5 rounds a tied embedding table to
    # bf16 for the logits; the HF side does the same in max_abs_diff_bf16_tied_table.
    model = resolve_maxtext_model(None, None, json.loads((tiny / "model" / "config.json").read_text()))
    step = latest_actor_step(layout)
    assert step == 1
    check = subprocess.run(
        [sys.executable, str(PARITY_CHECK), str(export), actor_params_uri(layout, step), model.name, *model.args()],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    result = json.loads(check.stdout.strip().splitlines()[-1])
    assert result["max_abs_diff_bf16_tied_table"] < 1e-4 * max(1.0, result["logit_scale"]), result
