"""The job page's goodput bar in headless Chromium against the real service: a trainer's `goodput` event
folded into JobPublic.goodput, drawn as one stacked bar whose segments are the job JSON's parts."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from harness.live_server import LiveService
from trainer.contract.run.goodput import TRAIN_PARTS

from .test_dashboard_browser import LIVE_TIMEOUT_MS, open_signed_in, shoot

pytestmark = pytest.mark.browser


def test_the_goodput_bar_draws_the_jobs_parts(page: Page, live_service: LiveService) -> None:
    job_id = live_service.submit("goodput-bar")["id"]
    live_service.wait_for_phase(job_id, "RUNNING")
    # Milliseconds: the parts must fit in the time the job has spent so far (the rest is `other`).
    train = dict.fromkeys(TRAIN_PARTS, 0.0) | {"rollout": 0.004, "update": 0.002, "logprobs": 0.001, "checkpoint": 0.001}
    live_service.emit(job_id, "goodput", attempt=1, train={"elapsed_s": 0.01, "parts": train, "step": 1})
    deadline = time.monotonic() + 10
    while (job := live_service.job(job_id))["goodput"]["parts"]["rollout"] != 0.004:
        assert time.monotonic() < deadline, job["goodput"]
        time.sleep(0.1)
    open_signed_in(page, live_service, f"#/jobs/{job_id}")
    panel = page.get_by_test_id("goodput")
    bar = panel.get_by_test_id("goodput-bar")
    expect(bar.locator('rect[data-part="rollout"]')).to_have_attribute("data-seconds", "0.004", timeout=LIVE_TIMEOUT_MS)
    drawn = bar.locator("rect").evaluate_all("rs => rs.map(r => [r.dataset.part, +r.dataset.seconds, +r.getAttribute('width')])")
    shown = live_service.job(job_id)["goodput"]  # read after the page's: `other` and the wall grow while it runs
    parts = [name for name, _seconds, _width in drawn]
    # In the service's order, every part that took time, each as wide as its seconds.
    assert parts == [name for name in shown["parts"] if name in parts]
    assert {"rollout", "update", "logprobs", "checkpoint", "other"} <= set(parts), drawn
    assert all(seconds == width for _name, seconds, width in drawn)
    assert {name: seconds for name, seconds, _ in drawn if name != "other"} == {
        name: seconds for name, seconds in shown["parts"].items() if name in parts and name != "other"
    }
    expect(panel.get_by_test_id("goodput-headline")).to_contain_text("productive (rollout + update) of")
    expect(panel.locator('li[data-part="rollout"]')).to_contain_text("Rollout")
    shoot(page, "job-goodput")
