"""POST /v1/jobs with grpo.async_rollout (MaxText's rl.use_agentic_rollout): a 422 naming the field and why, nothing
stored or launched (trainer/contract/spec/async_rollout.py has the reasons)."""

from __future__ import annotations

from pathlib import Path

from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A, spec_body


def test_async_rollout_is_a_422_naming_the_field_and_why(api: Api, tmp_path: Path) -> None:
    body = spec_body(tmp_path, grpo={"async_rollout": {"off_policy_steps": 1, "max_concurrency": 16}})
    response = api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    (detail,) = response.json()["detail"]
    assert "grpo.async_rollout (MaxText's rl.use_agentic_rollout) cannot run" in detail["msg"]
    assert "force_on_policy_ratio" in detail["msg"] and "on cpu" in detail["msg"]
    assert api.launcher.launched == [] and api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0
