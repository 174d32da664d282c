"""Comparing two eval jobs through the API, checked against an independent computation: a trained export and its
base evaluated on one suite (stand-in trainer: the outcomes, report and eval_report event the trainer writes), with
a known set of rows that flip. McNemar's exact p is scipy's binomial test on the discordant rows; the paired 95% CI
is a numpy percentile bootstrap of 10,000 resamples (a different random stream, so within a tolerance); the cost per
point is the training job's own cost (its usage) over the points gained."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest

from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from tests.service.conftest import Api
from tests.service.eval_runs import finish_eval, outcome_rows, submit_eval, suite_hash
from tests.service.service_helpers import TOKEN_A, spec_body, wait_for_phase
from trainer.contract import ArtifactWritten, RunLayout

N = 120
# Base right on rows 0-49; trained right on rows 10-79: 30 rows only the trained gets right, 10 only the base.
BASE = [int(i < 50) for i in range(N)]
TRAINED = [int(10 <= i < 80) for i in range(N)]
# Sampled accuracy over 4 samples: a non-0/1 score, so its CI is the bootstrap's alone.
BASE_SAMPLES = [[int((i + j) % 3 == 0) for j in range(4)] for i in range(N)]
TRAINED_SAMPLES = [[int((i + j) % 2 == 0) for j in range(4)] for i in range(N)]
# Two seeded bootstraps of 10,000 resamples of 120 rows agree within a row (1/120); taking the 5th percentile for the
# 2.5th would move a bound by 0.016.
CI_TOLERANCE = 0.01


def numpy_bootstrap(diffs: list[float], resamples: int = 10_000) -> tuple[float, float]:
    rng = np.random.default_rng(7)
    values = np.asarray(diffs)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _trained_job(api: Api, tmp_path: Path) -> str:
    """A TPU training job that ran a while (so it cost something) and exported."""
    job_id = api.submit(spec_body(tmp_path, name="trained", hardware={"accelerator": "v6e-8", "chips_per_vm": 8}))["id"]
    layout = RunLayout(str(tmp_path / "runs"), job_id)
    api.progress.add(ArtifactWritten(seq=0, time=datetime.now(UTC), job_id=job_id, name="export.export", uri=layout.export_dir))
    api.launcher.emit(job_id, ObservedState.RUNNING)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.RUNNING)
    api.launcher.emit(job_id, ObservedState.SUCCEEDED)
    wait_for_phase(lambda: api.phase(job_id), JobPhase.SUCCEEDED)
    return job_id


def test_trained_against_base_matches_scipy_and_a_numpy_bootstrap_with_cost_per_point(api: Api, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    trained = _trained_job(api, tmp_path)
    base = submit_eval(api, {"checkpoint": f"{trained}:base", "suite": {"name": "arith"}})
    after = submit_eval(api, {"checkpoint": f"{trained}:export", "suite": {"name": "arith"}, "baseline": base["id"]})
    content = suite_hash("arith rows")
    finish_eval(api, base["id"], outcome_rows(BASE, BASE_SAMPLES), content_hash=content, builtin=True, output=out)
    finish_eval(api, after["id"], outcome_rows(TRAINED, TRAINED_SAMPLES), content_hash=content, builtin=True, output=out)

    response = api.client.get(f"/v1/evals/{after['id']}/compare", params={"baseline": base["id"]}, headers=api.as_(TOKEN_A))
    assert response.status_code == 200, response.text
    found = response.json()
    scores = {s["score"]: s for s in found["comparison"]["scores"]}
    assert found["comparison"]["n"] == N and found["suite"]["version"] == 1 and found["suite"]["content_hash"] == content

    pass1 = scores["pass@1"]
    assert (pass1["a_only"], pass1["b_only"]) == (30, 10)
    assert pass1["difference"] == pytest.approx((sum(TRAINED) - sum(BASE)) / N)
    assert pass1["mcnemar_p"] == pytest.approx(binomtest(10, 40, 0.5).pvalue, rel=1e-9)
    low, high = numpy_bootstrap([t - b for t, b in zip(TRAINED, BASE, strict=True)])
    assert pass1["ci95"] == pytest.approx([low, high], abs=CI_TOLERANCE)

    sampled = scores["sampled"]
    diffs = [sum(t) / 4 - sum(b) / 4 for t, b in zip(TRAINED_SAMPLES, BASE_SAMPLES, strict=True)]
    assert sampled["difference"] == pytest.approx(float(np.mean(diffs))) and sampled["mcnemar_p"] is None
    assert sampled["ci95"] == pytest.approx(list(numpy_bootstrap(diffs)), abs=CI_TOLERANCE)

    # Cost per point: the training job's cost as its own usage shows it, over the points gained; the interval is the
    # cost over each CI bound (the whole pass@1 interval is a gain here).
    cost = api.client.get(f"/v1/jobs/{trained}", headers=api.as_(TOKEN_A)).json()["usage"]["cost_usd"]
    assert cost > 0
    per_point = {c["score"]: c for c in found["cost_per_point"]}
    points = pass1["difference"] * 100
    assert per_point["pass@1"]["usd_per_point"] == pytest.approx(cost / points)
    assert per_point["pass@1"]["ci95_usd_per_point"] == pytest.approx([cost / (pass1["ci95"][1] * 100), cost / (pass1["ci95"][0] * 100)])
    assert per_point["pass@1"]["training_job_id"] == trained and "per point of pass@1" in per_point["pass@1"]["verdict"]
    assert found["a"]["checkpoint"] == {"format": "huggingface", "params": None, "job_id": trained, "label": "export"}

    # The eval submitted with the baseline shows the same comparison once both have finished.
    view = api.client.get(f"/v1/evals/{after['id']}", headers=api.as_(TOKEN_A)).json()
    assert view["comparison"]["comparison"] == found["comparison"] and view["comparison_note"] is None


def test_no_gain_is_said_when_the_interval_includes_zero(api: Api, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    trained = _trained_job(api, tmp_path)
    base = submit_eval(api, {"checkpoint": f"{trained}:base", "suite": {"name": "arith"}})
    after = submit_eval(api, {"checkpoint": f"{trained}:export", "suite": {"name": "arith"}})
    content = suite_hash("arith rows")
    # 3 rows gained, 2 lost of 40: +2.5 points, an interval well across 0.
    finish_eval(api, base["id"], outcome_rows([int(i < 20) for i in range(40)]), content_hash=content, builtin=True, output=out)
    finish_eval(api, after["id"], outcome_rows([int(2 <= i < 23) for i in range(40)]), content_hash=content, builtin=True, output=out)
    found = api.client.get(f"/v1/evals/{after['id']}/compare", params={"baseline": base["id"]}, headers=api.as_(TOKEN_A)).json()
    pass1 = next(c for c in found["cost_per_point"] if c["score"] == "pass@1")
    assert pass1["ci95_points"][0] < 0 < pass1["ci95_points"][1]
    assert pass1["ci95_usd_per_point"] is None and pass1["verdict"].startswith("no gain established")
