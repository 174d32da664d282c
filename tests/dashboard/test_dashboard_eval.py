"""The job page's eval panel in headless Chromium against the real service: evaluations reach it the
way a run's do (`eval` events with their summaries appended to the job's events.jsonl, folded into
JobPublic.eval by the service, announced over SSE), and a job without evaluations says why."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from harness.eval_story import (
    DIFFERENCE,
    HEADLINE,
    HEADLINE_AT_STEP_10,
    HEADLINE_BEFORE_ONLY,
    TOTAL_STEPS,
    eval_summaries,
)
from harness.live_server import LiveService
from trainer.contract.run.evaluation import wilson_interval

from .test_dashboard_browser import LIVE_TIMEOUT_MS, open_signed_in, shoot

pytestmark = pytest.mark.browser


def _wait_for(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not done(value := read()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s}s: {value}")
        time.sleep(0.1)
    return value


def _bar(point: Locator) -> dict[str, float]:
    """An evaluation's error bar and dot as drawn, in the plot's own units (SVG y grows downwards)."""
    drawn: dict[str, float] = point.evaluate(
        """g => ({
            low: +g.querySelector('line.errbar').getAttribute('y1'),
            high: +g.querySelector('line.errbar').getAttribute('y2'),
            dot: +g.querySelector('circle').getAttribute('cy'),
            caps: g.querySelectorAll('line.errbar-cap').length,
        })"""
    )
    return drawn


def test_the_eval_panel_follows_a_runs_evaluations_with_error_bars(page: Page, live_service: LiveService) -> None:
    job = live_service.submit("gsm8k-evaluated", total_steps=TOTAL_STEPS, num_test_batches=2)
    job_id = job["id"]
    live_service.wait_for_phase(job_id, "RUNNING")
    open_signed_in(page, live_service, f"#/jobs/{job_id}")
    panel = page.locator("section.eval-panel")
    # Before train_rl's first evaluation: the service's reason, not an empty chart.
    expect(panel).to_have_attribute("data-status", "none", timeout=LIVE_TIMEOUT_MS)
    expect(panel.get_by_test_id("eval-reason")).to_contain_text("no evaluation has finished yet")
    expect(panel).not_to_contain_text("No data yet")

    before, step_10, after = eval_summaries()
    emit = live_service.emit
    emit(job_id, "stage_started", stage="train")
    emit(job_id, "eval", step=0, accuracy=before.correct / before.n, summary=before.model_dump(mode="json"))
    headline = panel.get_by_test_id("eval-headline")
    expect(headline).to_have_text(HEADLINE_BEFORE_ONLY, timeout=LIVE_TIMEOUT_MS)
    expect(panel.get_by_test_id("eval-difference")).to_have_text("")  # nothing to compare with yet

    for step in range(1, 11):
        emit(job_id, "train_step", step=step, total_steps=TOTAL_STEPS, reward_mean=0.1, reward_std=0.05, kl=0.01, loss=0.5)
    emit(job_id, "eval", step=10, accuracy=step_10.correct / step_10.n, summary=step_10.model_dump(mode="json"))
    expect(headline).to_have_text(HEADLINE_AT_STEP_10, timeout=LIVE_TIMEOUT_MS)
    expect(panel.get_by_test_id("eval-difference")).to_contain_text("Paired change (step 10 − before): +11 points")

    emit(job_id, "eval", step=TOTAL_STEPS, accuracy=after.correct / after.n, summary=after.model_dump(mode="json"))
    expect(headline).to_have_text(HEADLINE, timeout=LIVE_TIMEOUT_MS)
    expect(panel.get_by_test_id("eval-difference")).to_have_text(f"Paired change (after − before): {DIFFERENCE}")
    expect(panel).to_contain_text("paired over the 300 rows both evaluations share")

    # One dot and one capped error bar per evaluation, labelled before/after, each bar spanning the
    # evaluation's Wilson interval on the plot's accuracy axis.
    points = panel.locator("svg.eval-plot g.eval-point")
    expect(points).to_have_count(3)
    assert points.evaluate_all("gs => gs.map(g => g.dataset.label)") == ["before", "step-10", "after"]
    expect(panel.locator("svg.eval-plot text.point-label")).to_have_text(["before", "after"])
    drawn = {s.label: _bar(panel.locator(f'g.eval-point[data-label="{s.label}"]')) for s in (before, step_10, after)}
    for s in (before, step_10, after):
        bar = drawn[s.label]
        assert bar["caps"] == 2
        assert bar["high"] < bar["dot"] < bar["low"], (s.label, bar)
    # Pixels per unit of accuracy, from before's bar: the others' bars must be their intervals' heights.
    lo, hi = wilson_interval(before.correct, before.n)
    scale = (drawn["before"]["low"] - drawn["before"]["high"]) / (hi - lo)
    for s in (step_10, after):
        lo, hi = wilson_interval(s.correct, s.n)
        assert drawn[s.label]["low"] - drawn[s.label]["high"] == pytest.approx((hi - lo) * scale, rel=1e-6)
        assert drawn["before"]["dot"] - drawn[s.label]["dot"] == pytest.approx((s.correct - before.correct) / s.n * scale, rel=1e-6)

    # The numbers the plot leaves out are in the table beneath it.
    panel.get_by_text("Each evaluation (3)").click()
    after_row = panel.locator('tr[data-label="after"]')
    expect(after_row).to_contain_text("51% [45–57]")
    expect(after_row).to_contain_text("greedy, pass")
    shoot(page, "job-eval")


def test_a_job_that_runs_no_evaluation_says_so(page: Page, live_service: LiveService) -> None:
    job = live_service.submit("no-eval-split", num_test_batches=0)
    live_service.wait_for_phase(job["id"], "RUNNING")
    # MaxText's own eval log line (no summary): a metric point, not an evaluation with rows to show.
    live_service.emit(job["id"], "eval", step=3, accuracy=0.25)
    folded = _wait_for(lambda: live_service.job(job["id"]), lambda j: j["metrics"].get("eval_accuracy") == 0.25)
    assert folded["train_evals"]["status"] == "none"
    open_signed_in(page, live_service, f"#/jobs/{job['id']}")
    panel = page.locator("section.eval-panel")
    expect(panel).to_have_attribute("data-status", "none", timeout=LIVE_TIMEOUT_MS)
    expect(panel.get_by_test_id("eval-reason")).to_contain_text("grpo.num_test_batches is 0")
    expect(panel.locator("svg")).to_have_count(0)
    expect(panel.get_by_test_id("eval-headline")).to_have_text("")
