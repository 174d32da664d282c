"""The team dashboard in headless Debian Chromium against the real service on loopback.

Progress comes through the real channel: the test appends trainer events to the job's
events.jsonl and the service tails it; the job's process is a real child of the local launcher
(harness/held_trainer.py), so a cancel from the page really stops a process group.
"""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect

from harness.live_server import TOKEN, LiveService
from trainer.contract import SIGNAL_METRIC
from trainer.contract.spec.reward_sandbox import (
    CALLS_METRIC,
    ERRORS_METRIC,
    LATENCY_P50_METRIC,
    LATENCY_P95_METRIC,
    NETWORK_ISOLATED_METRIC,
    TIMEOUTS_METRIC,
    WRITES_CONFINED_METRIC,
)

from .conftest import REPO

pytestmark = pytest.mark.browser

SCREENSHOTS = REPO / "test-artifacts" / "dashboard"
LIVE_TIMEOUT_MS = 10_000  # events reach the page through a 0.1 s tail poll and the SSE stream


def sign_in(page: Page, service: LiveService, token: str = TOKEN) -> None:
    page.goto(f"{service.url}/")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()


def open_signed_in(page: Page, service: LiveService, route: str) -> None:
    """Sign in, then go to `route` ("#/jobs/ID"). Going there before the sign-in's token check has
    answered would race it: the router would find no token yet and show the sign-in form, and the
    check, on success, then moves to the board."""
    sign_in(page, service)
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    page.goto(f"{service.url}/{route}")


def tab_to(page: Page, target, max_presses: int = 15) -> None:
    """Press Tab until `target` has focus, as a keyboard user would."""
    for _ in range(max_presses):
        page.keyboard.press("Tab")
        if target.evaluate("el => el === document.activeElement"):
            return
    raise AssertionError(f"{target} not reachable with {max_presses} Tab presses")


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_nothing_is_readable_without_a_valid_token(page: Page, live_service: LiveService) -> None:
    assert httpx.get(f"{live_service.url}/v1/jobs").status_code == 401

    page.goto(f"{live_service.url}/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.locator("table.jobs")).to_have_count(0)

    sign_in(page, live_service, token="rlj_not-a-real-token-but-long-enough-000")
    expect(page.get_by_role("alert")).to_contain_text("That token was not accepted")
    expect(page.get_by_label("API token")).to_be_focused()

    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("empty-state")).to_contain_text("rljob submit")
    shoot(page, "board-empty")


def test_board_and_job_page_follow_a_running_job_until_it_is_cancelled(page: Page, live_service: LiveService) -> None:
    sign_in(page, live_service)
    expect(page.get_by_role("status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)

    # A job submitted elsewhere (the CLI) appears on the open board by itself.
    job = live_service.submit("gsm8k-llama-grpo", total_steps=10)
    assert job["submitted_by"] == "alice"  # the submitting token's name, not a label
    row = page.locator(f'tr[data-job-id="{job["id"]}"]')
    expect(row).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(row).to_contain_text("llama3.1-8b")
    expect(row).to_contain_text("alice")
    live_service.wait_for_phase(job["id"], "RUNNING")
    expect(row.locator(".phase")).to_have_text("RUNNING", timeout=LIVE_TIMEOUT_MS)

    emit = live_service.emit
    emit(job["id"], "run_started", attempt=1, run_uri=job["run_uri"])
    emit(job["id"], "stage_started", stage="convert")
    emit(job["id"], "stage_finished", stage="convert", duration_s=42.0)
    emit(job["id"], "stage_started", stage="train")
    for step in (1, 2, 3):
        emit(job["id"], "train_step", step=step, total_steps=10, reward_mean=0.1 * step, reward_std=0.05, kl=0.01 * step, loss=1 / step)
    expect(row.get_by_test_id("progress-text")).to_contain_text("3 / 10 steps", timeout=LIVE_TIMEOUT_MS)
    expect(row.get_by_test_id("reward")).to_have_text("0.3")
    expect(row.locator("progress")).to_have_attribute("value", "3")

    # Keyboard: Tab reaches the job's name link in its row, the focus ring shows, Enter opens it.
    link = row.get_by_role("link", name="gsm8k-llama-grpo")
    tab_to(page, link)
    assert link.evaluate("el => getComputedStyle(el).outlineStyle") == "solid"
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("gsm8k-llama-grpo")
    reward = page.locator('figure[data-chart^="Reward"]')
    expect(reward).to_have_attribute("data-points", "3", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator('li[data-stage="convert"]')).to_have_attribute("data-state", "done")
    expect(page.locator('li[data-stage="convert"]')).to_contain_text("42s")
    expect(page.locator('li[data-stage="train"]')).to_have_attribute("data-state", "running")

    # The charts and the progress bar advance as the job reports more steps.
    for step in (4, 5, 6):
        emit(job["id"], "train_step", step=step, total_steps=10, reward_mean=0.1 * step, reward_std=0.05, kl=0.01 * step, loss=1 / step)
    emit(job["id"], "eval", step=5, accuracy=0.625)
    emit(job["id"], "artifact", name="checkpoint-5", uri=f"{job['run_uri']}/rl/{job['id']}/checkpoints/actor/5", size_bytes=123456789)
    expect(reward).to_have_attribute("data-points", "6", timeout=LIVE_TIMEOUT_MS)
    expect(reward).to_contain_text("0.6 at step 6")
    expect(page.locator('figure[data-chart="KL divergence"]')).to_have_attribute("data-last-step", "6")
    # MaxText's eval log line alone is a metric (the progress panel's latest accuracy), not an
    # evaluation with rows: the eval panel keeps saying why it has none (test_dashboard_eval.py).
    expect(page.locator("section.panel").filter(has_text="Eval accuracy").locator("dd").filter(has_text="62.5%")).to_have_count(1)
    expect(page.locator("section.eval-panel").get_by_test_id("eval-reason")).to_contain_text("no evaluation has finished yet")
    expect(page.get_by_test_id("progress-text")).to_contain_text("6 / 10 steps")
    expect(page.get_by_role("table").filter(has_text="checkpoint-5")).to_contain_text("/checkpoints/actor/5")
    expect(page.get_by_test_id("logs")).to_contain_text("held_trainer: job", timeout=LIVE_TIMEOUT_MS)
    shoot(page, "job-running")

    # Cancel from the page: a confirmation first, then CANCELLING and CANCELLED as the process stops.
    page.get_by_role("button", name="Cancel job").click()
    dialog = page.get_by_role("dialog", name="Cancel this job?")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Keep running").click()
    expect(dialog).to_be_hidden()
    assert live_service.job(job["id"])["phase"] == "RUNNING"

    page.get_by_role("button", name="Cancel job").click()
    dialog.get_by_role("button", name="Cancel job").click()
    badge = page.locator(".job-head .phase")
    expect(badge).to_have_text(re.compile("CANCELLING|CANCELLED"), timeout=LIVE_TIMEOUT_MS)
    expect(badge).to_have_text("CANCELLED", timeout=20_000)
    expect(page.get_by_role("button", name="Cancel job")).to_be_hidden()
    assert live_service.job(job["id"])["phase"] == "CANCELLED"

    page.get_by_role("link", name="← All jobs").click()
    expect(row.locator(".phase")).to_have_text("CANCELLED")
    shoot(page, "board")


def test_a_failed_job_shows_why_and_the_phase_filter_finds_it(page: Page, live_service: LiveService) -> None:
    ok = live_service.submit("still-running")
    bad = live_service.submit("broken-reward-fn")
    live_service.wait_for_phase(bad["id"], "RUNNING")
    live_service.emit(bad["id"], "stage_started", stage="train")
    live_service.emit(bad["id"], "train_step", step=1, total_steps=10, reward_mean=0.2, reward_std=0.1, kl=0.0, loss=0.9)
    parts = {"checkpoints": 110 * 2**20, "converted": 0, "export": 79 * 2**20, "logs": 2**20, "samples": 0, "data": 512, "other": 10}
    live_service.emit(
        bad["id"], "storage", stage="train", storage={"total_bytes": sum(parts.values()), "parts": parts, "files": 9, "complete": False}
    )
    live_service.emit(
        bad["id"], "run_finished", ok=False, exit_code=70, message="reward function raised KeyError 'answer'", failed_stage="train"
    )
    live_service.finish_process(bad["id"], 70)
    live_service.wait_for_phase(bad["id"], "FAILED")

    sign_in(page, live_service)
    page.get_by_label("Phase").select_option("FAILED")
    expect(page.get_by_label("Phase")).to_be_focused()
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-job-id="{bad["id"]}"]')).to_be_visible()
    expect(page.locator(f'tr[data-job-id="{ok["id"]}"]')).to_have_count(0)

    page.get_by_role("link", name="broken-reward-fn").click()
    failure = page.get_by_test_id("failure")
    expect(failure).to_contain_text("reward function raised KeyError")
    expect(failure).to_contain_text("stage train")
    expect(page.locator('li[data-stage="train"]')).to_have_attribute("data-state", "failed")
    expect(page.get_by_role("button", name="Cancel job")).to_be_hidden()
    # The run directory's newest measurement, written as `rljob status` writes it.
    expect(page.get_by_test_id("storage")).to_have_text(
        "Run directory: 190 MiB (checkpoints 110 MiB, export 79 MiB, logs 1.0 MiB, ...) (incomplete: walk limit)"
    )
    shoot(page, "job-failed")


def test_an_unreachable_service_is_reported_and_a_revoked_session_returns_to_sign_in(page: Page, live_service: LiveService) -> None:
    sign_in(page, live_service)
    expect(page.get_by_role("status")).to_have_text("Live", timeout=LIVE_TIMEOUT_MS)
    live_service.stop()
    expect(page.get_by_role("status")).to_contain_text("Cannot reach the rljob service", timeout=20_000)
    shoot(page, "board-offline")

    # A token the service no longer accepts sends the viewer back to sign in, with the reason.
    page.evaluate("sessionStorage.setItem('rljob.token', 'rlj_revoked-token-0000000000000000000000')")
    live_service.start()
    page.reload()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(page.get_by_role("alert")).to_contain_text("not accepted")


def test_job_page_says_whether_the_job_is_learning_and_shows_its_samples(page: Page, live_service: LiveService) -> None:
    job = live_service.submit("reward-debugging", total_steps=10)
    job_id = job["id"]
    live_service.wait_for_phase(job_id, "RUNNING")
    emit = live_service.emit
    emit(job_id, "stage_started", stage="train")
    # Model output that looks like HTML must stay text on the page.
    hostile = "<img src=x onerror=\"document.title='pwned'\"> so 2+2 = <answer>4</answer>"
    live_service.write_samples(
        job_id,
        1,
        [
            {
                "group": 0,
                "prompt": "What is 2+2?",
                "completion": hostile,
                "rewards": {"exact_answer": 1.0, "format_match": 0.5},
                "total": 1.5,
            },
            {
                "group": 0,
                "prompt": "What is 2+2?",
                "completion": "five",
                "rewards": {"exact_answer": 0.0, "format_match": None},
                "total": 0.0,
            },
        ],
    )
    # The reward sandbox's figures of the step (trainer/maxtext_entry/reward_sandbox.py): on a platform without a seccomp
    # filter or network namespace, nor Landlock.
    sandbox = {CALLS_METRIC: 4.0, ERRORS_METRIC: 1.0, TIMEOUTS_METRIC: 0.0, LATENCY_P50_METRIC: 0.02, LATENCY_P95_METRIC: 0.5}
    sandbox[NETWORK_ISOLATED_METRIC] = 0.0
    sandbox[WRITES_CONFINED_METRIC] = 0.0
    emit(
        job_id,
        "train_step",
        step=1,
        total_steps=10,
        reward_mean=0.75,
        reward_std=0.5,
        kl=0.01,
        loss=0.4,
        metrics={SIGNAL_METRIC: 0.5, **sandbox},
    )

    open_signed_in(page, live_service, f"#/jobs/{job_id}")
    expect(page.get_by_role("heading", level=1)).to_have_text("reward-debugging")
    expect(page.locator(".job-head .health")).to_have_text("signal", timeout=LIVE_TIMEOUT_MS)
    signal_text = "at step 1, 50% of prompts had completions with different rewards"
    expect(page.get_by_test_id("health")).to_contain_text(signal_text)

    samples = page.locator("section.samples-panel")
    expect(samples).to_have_attribute("data-step", "1", timeout=LIVE_TIMEOUT_MS)
    summary = samples.get_by_test_id("samples-summary")
    expect(summary).to_contain_text("1 of 2 prompts had completions with different rewards")
    first = samples.locator("article.sample").first
    expect(first.get_by_test_id("completion")).to_have_text(hostile)  # as text: no <img> was made of it
    expect(samples.locator("img")).to_have_count(0)
    expect(first.locator('[data-reward="exact_answer"] dd')).to_have_text("1")
    expect(first.locator('[data-reward="format_match"] dd')).to_have_text("0.5")
    expect(first).to_contain_text("total reward 1.5")
    expect(samples.locator("article.sample").nth(1).locator('[data-reward="format_match"] dd')).to_have_text("—")

    # Three steps in which every completion of each prompt got the same reward: no signal, live.
    for step in (2, 3, 4):
        live_service.write_samples(
            job_id,
            step,
            [
                {
                    "group": 0,
                    "prompt": "What is 2+2?",
                    "completion": f"I cannot answer (step {step})",
                    "rewards": {"exact_answer": 0.0, "format_match": 0.0},
                    "total": 0.0,
                },
            ],
            with_signal=0,
        )
        emit(
            job_id,
            "train_step",
            step=step,
            total_steps=10,
            reward_mean=0.0,
            reward_std=0.0,
            kl=0.02,
            loss=0.3,
            metrics={SIGNAL_METRIC: 0.0, CALLS_METRIC: 4.0, TIMEOUTS_METRIC: 1.0},
        )
    expect(page.locator(".job-head .health")).to_have_text("no signal", timeout=LIVE_TIMEOUT_MS)
    # The reward calls add up over the steps (16 calls, 1 error, 3 timeouts); the latencies are the newest reported.
    sandbox_panel = page.get_by_test_id("reward-calls")
    expect(sandbox_panel.get_by_test_id("reward-calls-calls")).to_contain_text("16", timeout=LIVE_TIMEOUT_MS)
    expect(sandbox_panel.get_by_test_id("reward-calls-errors")).to_contain_text("1 (6.3%)")
    expect(sandbox_panel.get_by_test_id("reward-calls-timeouts")).to_contain_text("3 (18.8%)")
    expect(sandbox_panel.get_by_test_id("reward-calls-p50")).to_contain_text("20 ms")
    expect(sandbox_panel.get_by_test_id("reward-calls-p95")).to_contain_text("500 ms")
    network = sandbox_panel.get_by_test_id("reward-network")
    expect(network).to_contain_text("Network NOT isolated")
    expect(network).to_have_class(re.compile(r"\balert warn\b"))
    writes = sandbox_panel.get_by_test_id("reward-writes")
    expect(writes).to_contain_text("Writes NOT confined")
    expect(writes).to_have_class(re.compile(r"\balert warn\b"))
    note = page.get_by_test_id("health")
    expect(note).to_have_attribute("data-verdict", "no-signal")
    expect(note).to_contain_text("GRPO's advantages are zero")
    expect(samples).to_have_attribute("data-step", "4", timeout=LIVE_TIMEOUT_MS)  # the newest step, followed live
    expect(samples.get_by_test_id("completion")).to_have_text("I cannot answer (step 4)")
    shoot(page, "job-no-signal-samples")

    # Any step can be looked at; the panel stays on it.
    page.get_by_label("Step", exact=True).select_option("1")
    expect(samples).to_have_attribute("data-step", "1")
    expect(first.get_by_test_id("completion")).to_have_text(hostile)

    emit(
        job_id,
        "train_step",
        step=5,
        total_steps=10,
        reward_mean=0.0,
        reward_std=0.0,
        kl=0.02,
        loss=None,
        nonfinite=["actor/train/loss", "loss"],
        metrics={SIGNAL_METRIC: 0.5},
    )
    expect(page.locator(".job-head .health")).to_have_text("diverging", timeout=LIVE_TIMEOUT_MS)
    expect(note).to_contain_text("the loss is NaN or infinite at step 5")
    expect(note).to_contain_text("grpo.learning_rate")
    expect(samples).to_have_attribute("data-step", "1")
    # The trainer's watchdog reports the attempt hung (its restart is the service's, on the exit code: not here).
    stacks = f"{live_service.runs_dir}/{job_id}/logs/train.log"
    emit(job_id, "hung", attempt=1, stage="train", step=5, idle_s=600.0, limit_s=540.0, stacks=stacks)
    hung = page.get_by_test_id("hung")
    attempt = hung.get_by_test_id("hung-attempt-1")
    expect(attempt).to_contain_text("train stage after step 5", timeout=LIVE_TIMEOUT_MS)
    expect(attempt).to_contain_text("10m 0s")  # without progress
    expect(attempt).to_contain_text("9m 0s")  # the limit
    expect(attempt).to_contain_text(stacks)
    expect(hung.get_by_test_id("hung-summary")).to_contain_text("1 attempt(s) hung")
    assert page.title() != "pwned"
    shoot(page, "job-health-samples")

    page.get_by_role("link", name="← All jobs").click()
    expect(page.locator(f'tr[data-job-id="{job_id}"]').get_by_test_id("health")).to_have_text("diverging")
    shoot(page, "board-health")


def test_team_usage_page_shows_the_teams_jobs_and_totals(page: Page, live_service: LiveService) -> None:
    done = live_service.submit("usage-counted")
    live_service.wait_for_phase(done["id"], "RUNNING")
    live_service.finish_process(done["id"], 0)
    live_service.wait_for_phase(done["id"], "SUCCEEDED")

    sign_in(page, live_service)
    page.get_by_role("link", name="Team usage").click()
    expect(page.get_by_role("heading", name="Team usage")).to_be_visible()
    expect(page).to_have_url(re.compile(r"#/usage$"))
    slices = page.get_by_role("table", name="Chip-hours by team and slice")
    expect(slices.locator("tbody tr")).to_have_count(1)
    expect(slices.locator("tbody tr")).to_contain_text("cpu on-demand")
    expect(slices.locator("tfoot")).to_contain_text("$0.00")  # a cpu job holds no TPU chips
    jobs = page.get_by_role("table", name="Jobs, newest first")
    expect(jobs.get_by_role("link", name="usage-counted")).to_be_visible()
    expect(jobs).to_contain_text("SUCCEEDED")
    page.get_by_label("Jobs submitted in the").select_option("7")
    expect(page).to_have_url(re.compile(r"#/usage\?days=7$"))
    expect(page.get_by_role("table", name="Jobs, newest first").get_by_role("link", name="usage-counted")).to_be_visible()
    shoot(page, "team-usage")
    jobs.get_by_role("link", name="usage-counted").click()
    expect(page).to_have_url(re.compile(rf"#/jobs/{done['id']}$"))
