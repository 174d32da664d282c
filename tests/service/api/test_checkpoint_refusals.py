"""A checkpoint the trainer would refuse before any stage is a 422 at submit naming the field and what is missing,
and nothing is stored: a family MaxText converts but rljob does not run (read from a local config.json, or named by
model.name), a config value MaxText does not implement (Llama 3.2's RoPE scaling). A Qwen3 dense one is accepted
with its fit estimate read from the same config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.service.api.test_fit_check import V6E1, _tutorial
from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A
from tests.trainer.sizing.test_hf_families import QWEN3_06B
from tests.trainer.sizing.test_hf_model import LLAMA_32_1B


def _checkpoint(tmp_path: Path, config: dict[str, Any]) -> str:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    return str(model)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({**QWEN3_06B, "model_type": "qwen3_moe", "num_experts": 128}, "config.json model_type is 'qwen3_moe' (Qwen3 MoE)"),
        ({**QWEN3_06B, "model_type": "gemma3_text"}, "missing for Gemma 3: Gemma's decoder"),
        ({**QWEN3_06B, "model_type": "gpt_oss"}, "missing for gpt-oss: mixture-of-experts layers"),
        (LLAMA_32_1B, "config.json rope_scaling.factor is 32.0; MaxText's llama3 RoPE scaling is fixed at factor=8.0"),
        ({**QWEN3_06B, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "config.json rope_scaling RoPE scaling 'yarn'"),
    ],
)
def test_a_checkpoint_rljob_cannot_run_is_refused_at_submit(api: Api, tmp_path: Path, config: dict[str, Any], says: str) -> None:
    body = _tutorial(tmp_path, model={"name": None, "source": _checkpoint(tmp_path, config), "tokenizer": None}, hardware=V6E1)
    response = api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    (detail,) = response.json()["detail"]
    assert detail["loc"] == ["body", "model", "source"] and says in detail["msg"], detail
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0 and api.launcher.launched == []


def test_a_model_name_of_an_unsupported_family_is_refused_at_submit(api: Api, tmp_path: Path) -> None:
    body = _tutorial(tmp_path, model={"name": "gemma2-9b", "source": "google/gemma-2-9b", "tokenizer": None}, hardware=V6E1)
    response = api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    (detail,) = response.json()["detail"]
    assert detail["loc"] == ["body", "model", "name"] and "'gemma2-9b' is a Gemma 2 model" in detail["msg"], detail


def test_a_qwen3_dense_checkpoint_is_accepted_with_its_own_shape_estimated(api: Api, tmp_path: Path) -> None:
    body = _tutorial(tmp_path, model={"name": None, "source": _checkpoint(tmp_path, QWEN3_06B), "tokenizer": None}, hardware=V6E1)
    job = api.submit(body)
    fit = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(TOKEN_A)).json()["fit_estimate"]
    assert fit["model_source"] == "config.json" and fit["verdict"] == "fits", fit
