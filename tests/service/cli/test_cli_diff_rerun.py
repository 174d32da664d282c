"""`rljob rerun` and `rljob diff` through typer's CliRunner against a live service on loopback (local launcher, the
stand-in trainer, which writes repro.json with the trainer's own writer): two jobs that differ only in learning rate
diff to exactly that key with both outcomes shown, and a plain rerun's repro record equals the first's but for the id."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.service.service_helpers import TOKEN_A, spec_body, wait_until


def _api(live_url: str, path: str) -> Any:
    response = httpx.get(f"{live_url}{path}", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert response.status_code == 200, response.text
    return response.json()


def _succeeded(live_url: str, job_id: str) -> None:
    wait_until(lambda: _api(live_url, f"/v1/jobs/{job_id}")["phase"] == "SUCCEEDED", timeout_s=60)


def _rerun(run_cli: Callable[..., Any], job_id: str, *sets: str) -> tuple[str, str]:
    result = run_cli("rerun", job_id, *(arg for s in sets for arg in ("--set", s)))
    assert result.exit_code == 0, result.output
    return result.output.split("submitted ")[1].split()[0], result.output


def test_a_learning_rate_rerun_diffs_to_that_key_and_a_plain_rerun_reproduces_the_record(
    run_cli: Callable[..., Any], live_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_body(tmp_path, labels={"fake-steps": "3", "fake-eval-n": "40"})))
    submitted = run_cli("submit", str(spec), "--follow")
    assert submitted.exit_code == 0, submitted.output
    first = submitted.output.split("submitted ")[1].split()[0]

    second, said = _rerun(run_cli, first, "grpo.learning_rate=1e-5")
    assert "grpo.learning_rate: 3e-06 -> 1e-05" in said
    _succeeded(live_url, second)
    found = json.loads(run_cli("diff", first, second, "-o", "json").stdout)
    assert [(d["key"], d["a"], d["b"]) for d in found["spec"]] == [("grpo.learning_rate", 3e-6, 1e-5)]
    assert found["missing_records"] == [] and all(not items for items in found["record"].values()), found["record"]
    outcomes = found["outcomes"]
    assert [o["job_id"] for o in outcomes] == [first, second]
    for outcome in outcomes:  # the stand-in's rewards are 0.1 x step over 3 steps; its eval half right of 40
        assert outcome["final_reward"] == pytest.approx(0.3) and outcome["best_reward_step"] == 3
        assert outcome["steps"] == 3 and outcome["eval_after"]["n"] == 40 and outcome["eval_after"]["ci95"][0] < 0.5
    table = run_cli("diff", first, second)
    assert table.exit_code == 0 and "grpo.learning_rate" in table.output and "eval after" in table.output

    third, said = _rerun(run_cli, first)
    assert "no changes" in said
    _succeeded(live_url, third)
    record_first, record_third = _api(live_url, f"/v1/jobs/{first}/repro"), _api(live_url, f"/v1/jobs/{third}/repro")
    assert (record_first["job_id"], record_third["job_id"]) == (first, third)
    assert {**record_first, "job_id": None} == {**record_third, "job_id": None}


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("grpo.nope=1", "the spec has no key 'grpo.nope'"),
        ("nothing.here=1", "the spec has no section 'nothing'"),
        ("grpo=1", "names a section"),
        ("grpo.learning_rate", "expected KEY=VALUE"),
        ("grpo.learning_rate=[1, 2]", "is not one scalar"),
        ("grpo.learning_rate=NaN", "is not a finite number"),
        ("grpo.learning_rate=!!python/object/apply:os.system ['true']", "is not a YAML value"),
        ("grpo.learning_rate=fast", "learning_rate"),  # the service's 422, with the field
        ("team=other", "set by the service"),
    ],
)
def test_a_bad_setting_is_a_message_and_submits_nothing(
    run_cli: Callable[..., Any], live_url: str, tmp_path: Path, setting: str, says: str
) -> None:
    first = _api_submit(live_url, tmp_path)
    result = run_cli("rerun", first, "--set", setting)
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split()) and "Traceback" not in result.output  # rich wraps long lines
    assert _api(live_url, "/v1/jobs")["count"] == 1


def _api_submit(live_url: str, tmp_path: Path) -> str:
    headers = {"Authorization": f"Bearer {TOKEN_A}"}
    response = httpx.post(f"{live_url}/v1/jobs", json=spec_body(tmp_path, labels={"fake-steps": "1"}), headers=headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])
