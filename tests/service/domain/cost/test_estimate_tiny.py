"""Issue 37's Done-when for the estimate: with history from two earlier tiny jobs, the estimate for a third
brackets its actual wall time, and both figures show in the API and in `rljob status`.

Slow (the real trainer on the tiny model, three times, each as short as it goes: one train step, no evaluation, no
export): CI runs it with `-m slow`, in lane 1 after the other tiny jobs of the lane, so its conversion is cached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from harness.live_server import served
from service.app import create_app
from service.cli.main import app as rljob_cli
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import TOKEN_A, wait_for_phase
from tests.service.tiny_service import TINY_WAIT_S, embedded_settings, offline, tiny_body


def _short_tiny_job(tiny_dir: Path, tiny_output: Path) -> dict[str, Any]:
    body = tiny_body(tiny_dir, tiny_output)
    body["name"] = "tiny-estimate"
    body["grpo"] |= {"num_batches": 1, "num_test_batches": 0}  # one step, no evaluation
    body["dataset"].pop("eval_files")
    body["export"] = {"enabled": False}
    return body


@pytest.mark.slow
@pytest.mark.timeout(3 * 1500)
def test_an_estimate_from_two_tiny_jobs_brackets_the_third_and_shows_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_dir: Path, tiny_output: Path
) -> None:
    offline(monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RLJOB_CONFIG", raising=False)
    settings = embedded_settings(tmp_path)
    body = _short_tiny_job(tiny_dir, tiny_output)
    with (
        served(create_app(settings)) as url,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN_A}"}, timeout=30) as http,
    ):

        def run_to_success() -> dict[str, Any]:
            submitted = http.post("/v1/jobs", json=body)
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            try:
                wait_for_phase(lambda: http.get(f"/v1/jobs/{job_id}").json()["phase"], JobPhase.SUCCEEDED, timeout_s=TINY_WAIT_S)
            except AssertionError:
                print(http.get(f"/v1/jobs/{job_id}/logs", params={"tail_lines": 80}).text)
                raise
            return http.get(f"/v1/jobs/{job_id}").json()

        first = run_to_success()
        assert first["estimate"]["basis"] == "formula"  # nothing of its shape had run yet
        second = run_to_success()
        dry = http.post("/v1/jobs", params={"dry_run": "estimate"}, json=body)
        assert dry.status_code == 200, dry.text
        estimate = dry.json()
        assert estimate["basis"] == "history" and estimate["history_job_ids"] == [second["id"], first["id"]]
        assert http.get("/v1/jobs").json()["count"] == 2  # the dry run made nothing

        third = run_to_success()
        kept, actuals = third["estimate"], third["estimate_actuals"]
        assert kept["basis"] == "history" and kept["history_job_ids"] == [second["id"], first["id"]]
        wall = actuals["wall_s"]
        runs = [job["estimate_actuals"]["run_s"]["actual"] for job in (first, second, third)]
        print(f"wall: estimate {kept['wall_s']}, actual {wall['actual']} s; run seconds of the three jobs {runs}")
        assert kept["wall_s"]["low"] <= wall["actual"] <= kept["wall_s"]["high"] and wall["within"] is True, (kept, actuals)

        shown = CliRunner().invoke(rljob_cli, ["--url", url, "--token", TOKEN_A, "status", third["id"]], catch_exceptions=False)
        assert shown.exit_code == 0, shown.output
        text = " ".join(shown.output.split())
        assert "estimate vs actual history (2 history jobs)" in text
        wall_line = next(line for line in shown.output.splitlines() if line.strip().startswith("wall"))
        assert "->" in wall_line and "(inside)" in wall_line, wall_line
