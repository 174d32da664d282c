"""The fit check at submit, through the real app and store (fakes only at the launcher): a job that
cannot fit its accelerator's memory is a 422 naming hardware.accelerator with the numbers, and nothing
is stored; one that fits is stored with its estimate, shown by GET /v1/jobs/{id}; one close to the
limit is accepted with the warning. `rljob submit --dry-run` shows the same estimate without storing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from service.cli.main import app as cli
from service.cli.output import console, print_job
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.views import to_public
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A
from trainer.contract.spec.file import load_spec_file
from trainer.sizing.fit import estimate_job_fit
from trainer.sizing.tpu_memory import GIB

TUTORIAL = Path(__file__).resolve().parents[3] / "examples" / "tutorial-llama31-8b-v6e8.yaml"
V6E1 = {"accelerator": "v6e-1", "chips_per_vm": 1, "rollout_engine": "vllm", "rollout_tensor_parallelism": -1}
V5E1 = {"accelerator": "v5e-1", "chips_per_vm": 1, "rollout_engine": "vllm", "rollout_tensor_parallelism": -1}


def _tutorial(tmp_path: Path, **changes: dict[str, Any]) -> dict[str, Any]:
    """The tutorial's job (Llama 3.1 8B) with some sections changed, writing under tmp_path."""
    body: dict[str, Any] = yaml.safe_load(TUTORIAL.read_text())
    body["output"] = str(tmp_path / "runs")
    for section, update in changes.items():
        body[section] = {**body[section], **update}
    return body


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines at the terminal width


def test_llama31_8b_on_v6e_1_is_refused_with_the_numbers_and_nothing_stored(api: Api, tmp_path: Path) -> None:
    response = api.client.post("/v1/jobs", json=_tutorial(tmp_path, hardware=V6E1), headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "hardware", "accelerator"]
    message = problem["msg"]
    assert message.startswith("needs ~") and "GiB per chip (params " in message
    assert "optimizer" in message and "KV cache" in message and "v6e-1 has 32 GiB per chip" in message
    assert api.launcher.launched == []
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0


def test_kept_layers_that_do_not_fit_are_refused_at_hardware_layer_activations(api: Api, tmp_path: Path) -> None:
    """The estimate names the field it refuses (FitEstimate.refused_field): at batch 18 on v6e-4, keeping each layer's
    activations in HBM does not fit where offloading them does, so the 422 is at layer_activations, not the accelerator."""
    v6e4 = {"accelerator": "v6e-4", "chips_per_vm": 4, "layer_activations": "hbm"}
    response = api.client.post("/v1/jobs", json=_tutorial(tmp_path, hardware=v6e4, grpo={"batch_size": 18}), headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "hardware", "layer_activations"]
    assert "with hardware.layer_activations auto or offload it needs ~" in problem["msg"]
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0
    offloaded = api.submit(_tutorial(tmp_path, hardware=v6e4 | {"layer_activations": "offload"}, grpo={"batch_size": 18}))
    assert "refused_field" not in api.client.get(f"/v1/jobs/{offloaded['id']}", headers=api.as_(TOKEN_A)).json()["fit_estimate"]


def test_llama31_8b_on_v6e_8_is_accepted_and_its_estimate_is_shown(api: Api, tmp_path: Path) -> None:
    created = api.submit(_tutorial(tmp_path))
    job = api.client.get(f"/v1/jobs/{created['id']}", headers=api.as_(TOKEN_A)).json()
    fit = job["fit_estimate"]
    assert fit == created["fit_estimate"]
    assert fit["verdict"] == "fits" and fit["accelerator"] == "v6e-8" and fit["model_source"] == "maxtext llama3.1-8b"
    assert fit["parameters"] == 8_030_261_248 and fit["capacity_bytes_per_chip"] == 32 * GIB
    parts = fit["per_chip"]
    assert set(parts) == {
        *("params", "optimizer", "gradients", "reference", "activations", "logprobs"),
        *("rollout_weights", "decode_weights", "kv_cache"),
    }
    # The largest phase of a step; on one VM each phase also holds the other side's resident weights.
    phases = {p["name"]: p for p in fit["phases"]}
    assert set(phases) == {"rollout", "log-probs", "optimizer sharding", "update"}
    peak = phases[fit["peak_phase"]]
    assert peak["resident"] + peak["arrays"] + peak["program"] == fit["total_bytes_per_chip"] < 0.9 * 32 * GIB
    assert phases["rollout"]["resident"] == parts["params"] + parts["optimizer"] + parts["reference"] + parts["rollout_weights"]
    assert "% of v6e-8's 32 GiB per chip" in fit["message"]


def test_a_job_close_to_the_limit_is_accepted_with_a_warning(api: Api, tmp_path: Path) -> None:
    body = _tutorial(tmp_path, grpo={"batch_size": 8, "num_generations": 8}, hardware={"accelerator": "v5e-8", "chips_per_vm": 8})
    job = api.submit(body)
    fit = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(TOKEN_A)).json()["fit_estimate"]
    # Weighed against what XLA may allocate of a v5e chip (JAX's bytes_limit on the lent one), not the whole 16 GiB.
    assert fit["verdict"] == "tight" and 0.9 * 16_909_336_064 < fit["total_bytes_per_chip"] <= 16_909_336_064
    assert "close to the limit" in fit["message"]
    assert api.launcher.launched == [job["id"]]


def test_a_small_model_on_v5e_1_is_accepted_and_counted_against_16_gib(api: Api, tmp_path: Path) -> None:
    """v5e-1 (one ct5lp-hightpu-1t chip) is an accelerator a spec may name, and its estimate uses v5e's 16 GiB of HBM."""
    qwen = {"name": "qwen3-0.6b", "source": "Qwen/Qwen3-0.6B", "tokenizer": None}
    job = api.submit(_tutorial(tmp_path, model=qwen, hardware=V5E1))
    fit = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(TOKEN_A)).json()["fit_estimate"]
    assert fit["verdict"] == "fits" and fit["accelerator"] == "v5e-1" and fit["capacity_bytes_per_chip"] == 16 * GIB
    assert "% of the 15.7 GiB XLA may allocate of v5e-1's 16 GiB per chip" in fit["message"]
    assert api.launcher.launched == [job["id"]]


def test_llama31_8b_on_v5e_1_is_refused_pointing_at_the_v5e_slice_that_holds_it(api: Api, tmp_path: Path) -> None:
    response = api.client.post("/v1/jobs", json=_tutorial(tmp_path, hardware=V5E1), headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "hardware", "accelerator"]
    # On v5e-4 it still needs ~24 GiB per chip: the smallest v5e slice that holds it is v5e-8.
    assert "v5e-1 has 16 GiB per chip (XLA may allocate 15.7 of them); it would fit on v5e-8" in problem["msg"]
    assert api.launcher.launched == []


def test_a_model_of_unknown_shape_is_accepted_without_an_estimate(api: Api, tmp_path: Path) -> None:
    # A hub checkpoint without model.name: its config.json is read by the trainer, not at submit.
    body = _tutorial(tmp_path, model={"name": None, "source": "Qwen/Qwen3-8B", "tokenizer": None}, hardware=V6E1)
    job = api.submit(body)
    assert job["fit_estimate"] is None


def test_a_cpu_job_carries_an_unchecked_estimate(api: Api, tmp_path: Path) -> None:
    cpu = {"accelerator": "cpu", "chips_per_vm": 1, "rollout_engine": "jax", "rollout_tensor_parallelism": 1}
    job = api.submit(_tutorial(tmp_path, hardware=cpu))
    assert job["fit_estimate"]["verdict"] == "unchecked" and job["fit_estimate"]["capacity_bytes_per_chip"] is None


def test_dry_run_prints_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLJOB_K8S_IMAGE", raising=False)
    result = CliRunner().invoke(cli, ["submit", str(TUTORIAL), "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    note = _flat(result.stderr)
    assert "memory (fits): needs ~" in note and "of v6e-8's 32 GiB per chip" in note and "nothing submitted" in note


def test_dry_run_refuses_what_the_service_would_refuse(tmp_path: Path) -> None:
    spec = tmp_path / "v6e-1.yaml"
    spec.write_text(yaml.safe_dump(_tutorial(tmp_path, hardware=V6E1)))
    result = CliRunner().invoke(cli, ["submit", str(spec), "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    message = _flat(result.output)
    assert "would be refused: hardware.accelerator: needs ~" in message and "v6e-1 has 32 GiB per chip" in message
    assert "Traceback" not in result.output


def test_status_shows_the_estimate(tmp_path: Path) -> None:
    spec = load_spec_file(TUTORIAL).model_copy(update={"output": str(tmp_path / "runs")})
    fit = estimate_job_fit(load_spec_file(TUTORIAL))
    assert fit is not None
    now = datetime(2026, 1, 1, tzinfo=UTC)
    record = JobRecord(
        id="rl-000000000001", team="t", name="n", spec=spec, spec_hash="x", phase=JobPhase.QUEUED, created_at=now, updated_at=now
    )
    tight = fit.model_copy(update={"verdict": "tight", "message": "needs ~15.0 GiB per chip (params 1.9), 94% of v5e-8's"})
    job = to_public(record, now).model_copy(update={"fit_estimate": tight})
    with console.capture() as captured:
        print_job(job)
    assert "memory" in captured.get() and "tight: needs ~15.0 GiB per chip" in _flat(captured.get())
