"""The run diff (#/diff/A/B) in headless Chromium against the real service: two jobs that differ in learning
rate, picked on the board with their tick boxes, show that key with both values (GET /v1/jobs/diff), both
outcomes, and both reward curves and evaluations overlaid, each labelled with its job. The same page then
follows the view's hash to the cases without two comparable runs: a run with no metrics yet, a job that is
not visible, and the same job twice. One live service and one page load."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from harness.eval_story import TOTAL_STEPS, eval_summaries
from harness.live_server import LiveService

from .test_dashboard_browser import LIVE_TIMEOUT_MS, shoot, sign_in

pytestmark = pytest.mark.browser

LOW_STEPS, HIGH_STEPS = 4, 6  # different counts, so each curve's count is its own


def _settled(service: LiveService, job_id: str, steps: int, evals: int) -> None:
    """Wait until the service has folded the emitted events: the view is read once, not followed."""
    deadline = time.monotonic() + 10
    while True:
        with service.api() as client:
            points = client.get(f"/v1/jobs/{job_id}/metrics").raise_for_status().json()["points"]
        job: dict[str, Any] = service.job(job_id)
        if sum(p["kind"] == "train" for p in points) == steps and len(job["train_evals"]["points"]) == evals:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{job_id}: {len(points)} metric points, eval {job['eval']}")
        time.sleep(0.1)


def test_two_runs_compared_side_by_side_with_overlaid_curves(page: Page, live_service: LiveService) -> None:
    low = live_service.submit("lr-low", total_steps=TOTAL_STEPS, learning_rate=1e-6)
    high = live_service.submit("lr-high", total_steps=TOTAL_STEPS, learning_rate=5e-6)
    fresh = live_service.submit("lr-fresh", total_steps=TOTAL_STEPS, learning_rate=1e-6)
    before, step_10, after = eval_summaries()
    # Rewards rise at different rates, so the two curves are apart on the chart (and in the screenshot).
    for job, steps, rate, evals in ((low, LOW_STEPS, 0.1, (before,)), (high, HIGH_STEPS, 0.15, (before, step_10, after))):
        live_service.wait_for_phase(job["id"], "RUNNING")
        live_service.emit(job["id"], "stage_started", stage="train")
        for step in range(1, steps + 1):
            live_service.emit(
                job["id"], "train_step", step=step, total_steps=TOTAL_STEPS, reward_mean=rate * step, reward_std=0.05, kl=0.01, loss=0.5
            )
        for s in evals:
            live_service.emit(job["id"], "eval", step=s.step, accuracy=s.correct / s.n, summary=s.model_dump(mode="json"))
        _settled(live_service, job["id"], steps, len(evals))

    # The board: Compare waits for exactly two ticks.
    sign_in(page, live_service)
    compare = page.get_by_role("button", name="Compare")
    for job in (low, high, fresh):
        expect(page.locator(f'tr[data-job-id="{job["id"]}"]')).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(compare).to_be_disabled()
    page.get_by_role("checkbox", name=f"Compare lr-high ({high['id']})").check()
    expect(compare).to_be_disabled()
    page.get_by_role("checkbox", name=f"Compare lr-low ({low['id']})").check()
    expect(compare).to_be_enabled()
    compare.click()
    # The older job is a, whichever was ticked first.
    expect(page).to_have_url(re.compile(re.escape(f"#/diff/{low['id']}/{high['id']}") + "$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Compare runs")

    differences = page.get_by_test_id("differences")
    row = differences.locator('tr[data-key="grpo.learning_rate"]')
    expect(row.locator("td")).to_have_text(["0.000001", "0.000005"], timeout=LIVE_TIMEOUT_MS)
    expect(differences.locator("thead th")).to_have_text(["Key", f"a: lr-low ({low['id']})", f"b: lr-high ({high['id']})"])
    expect(differences.locator("tr[data-key='name']")).to_have_count(0)  # a name says nothing about an outcome
    expect(page.get_by_test_id("missing-records")).to_contain_text("No repro record")  # the held trainer writes none

    outcomes = page.get_by_test_id("outcomes")
    expect(outcomes.locator('tr[data-row="Final reward"] td')).to_have_text(["0.4", "0.9"])
    expect(outcomes.locator('tr[data-row="Best reward"] td')).to_have_text(["0.4 at step 4", "0.9 at step 6"])
    expect(outcomes.locator('tr[data-row="Eval before [95% CI]"] td')).to_have_text(["34% [29–40]", "34% [29–40]"])
    expect(outcomes.locator('tr[data-row="Eval after [95% CI]"] td')).to_have_text(["—", "51% [45–57]"])
    expect(outcomes.locator('tr[data-row="Steps"] td')).to_have_text([f"{LOW_STEPS} / {TOTAL_STEPS}", f"{HIGH_STEPS} / {TOTAL_STEPS}"])

    # One reward chart, one legend item per job with its own point count, on one step axis.
    reward = page.locator('figure[data-chart^="Reward"]')
    legend = reward.locator(".chart-legend li")
    expect(legend).to_have_count(2)
    expect(legend.locator(".series-label")).to_have_text([f"lr-low ({low['id']})", f"lr-high ({high['id']})"])
    assert legend.evaluate_all("lis => lis.map(li => +li.dataset.points)") == [LOW_STEPS, HIGH_STEPS]
    expect(reward).to_have_attribute("data-points", str(HIGH_STEPS))
    expect(reward.locator("canvas")).to_have_count(1)
    swatches = legend.locator(".swatch").evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")
    assert len(set(swatches)) == 2, swatches

    # The evaluations: every point of both jobs on one plot, each with its error bar and its job.
    plot = page.locator("svg.eval-plot.overlay")
    expect(plot.locator("g.eval-point")).to_have_count(4)
    by_job = plot.locator("g.eval-point").evaluate_all("gs => gs.map(g => [g.dataset.job, g.dataset.label])")
    assert by_job == [[f"lr-low ({low['id']})", "before"], *[[f"lr-high ({high['id']})", s.label] for s in (before, step_10, after)]]
    expect(plot.locator("g.eval-point line.errbar")).to_have_count(4)
    expect(plot.locator("path.eval-line")).to_have_count(1)  # lr-low has one evaluation: a point, no line
    fills = plot.locator("g.eval-point circle").evaluate_all("cs => cs.map(c => getComputedStyle(c).fill)")
    assert fills[0] != fills[1] and len(set(fills)) == 2, fills
    shoot(page, "run-diff")

    # A run without metrics yet: its curve and evaluations are absent, with a note, not an empty line.
    page.evaluate(f"location.hash = '#/diff/{low['id']}/{fresh['id']}'")
    expect(reward.locator(".chart-legend li")).to_have_count(1)
    expect(reward.get_by_test_id("absent")).to_have_text(f"lr-fresh ({fresh['id']}): no train steps reported yet, so no curve.")
    expect(page.locator(f'.diff-eval [data-testid="absent"][data-job="{fresh["id"]}"]')).to_contain_text("no evaluation to draw")

    page.evaluate(f"location.hash = '#/diff/{low['id']}/rl-000000000000'")
    expect(page.get_by_role("alert")).to_contain_text("Job not found")
    expect(page.get_by_role("alert")).to_contain_text("no job 'rl-000000000000' visible to your team")

    page.evaluate(f"location.hash = '#/diff/{low['id']}/{low['id']}'")
    expect(page.get_by_role("alert")).to_contain_text("The same job twice")
    expect(page.get_by_test_id("differences")).to_have_count(0)
