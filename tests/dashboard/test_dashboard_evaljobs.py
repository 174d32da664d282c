"""Eval jobs in the dashboard, in headless Chromium against the real service: eval jobs submitted through POST /v1/evals
(or made by the service for a training job's checkpoints) run as held processes of the local launcher; the test
writes what an eval job's trainer writes (its outcomes file, then its `eval_report` event) and lets each succeed, so
scores, suite versions, comparisons and cost per point are the service's own. Each test asserts that the page shows
the API's numbers: every score and difference with its 95% interval in words, each interval plot's bar spanning the
API's interval, McNemar's p as `rljob` prints it, and the service's reason where it refuses to compare."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from harness.live_server import LiveService
from trainer.contract import RunLayout
from trainer.contract.run.eval_report import EvalReport, FunctionOutcome, RowOutcome, summarize
from trainer.contract.run.evaluation import row_id
from trainer.contract.spec.eval_suite import EvalCheckpoint, EvalSampling, SuiteIdentity

from .test_dashboard_browser import LIVE_TIMEOUT_MS, open_signed_in, shoot

pytestmark = pytest.mark.browser

FUNCTION = "exact"
HASH_V1, HASH_V2 = "0123456789abcdef", "fedcba9876543210"  # the suite's content as two versions
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
SCORES = ("pass@1", "sampled", "pass@k", "maj@k")
MINUS = "\u2212"


def _wait_for(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not done(value := read()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s}s: {value}")
        time.sleep(0.1)
    return value


def _rows(greedy: list[int]) -> list[RowOutcome]:
    """Row i: the greedy completion right or not; two samples, the second right on every third row."""
    rows = []
    for i, g in enumerate(greedy):
        samples = [g, int(i % 3 == 0)]
        question = f"what is {i} + {i}?"
        outcome = FunctionOutcome(greedy=float(g), samples=[float(s) for s in samples], majority=int(sum(samples) == 2))
        rows.append(
            RowOutcome(
                id=row_id(question),
                index=i,
                question=question,
                answers=[str(2 * i)],
                greedy="...",
                samples=["..."] * 2,
                functions={FUNCTION: outcome},
            )
        )
    return rows


def _finish_eval(service: LiveService, eval_id: str, greedy: list[int], content_hash: str = HASH_V1) -> None:
    """What an eval job's trainer leaves (outcomes, then the report event), then its process exits 0."""
    job = service.wait_for_phase(eval_id, "RUNNING")
    task = job["spec"]["evaluation"]
    rows = _rows(greedy)
    layout = RunLayout(str(service.runs_dir), eval_id)
    Path(layout.eval_dir).mkdir(parents=True, exist_ok=True)
    Path(layout.eval_outcomes).write_text("".join(row.model_dump_json() + "\n" for row in rows))
    report = EvalReport(
        suite=SuiteIdentity(
            name=task["suite"]["name"],
            builtin=True,
            content_hash=content_hash,
            rows=len(rows),
            reward_functions=[FUNCTION],
            sampling=EvalSampling(),
        ),
        checkpoint=EvalCheckpoint.model_validate(task["checkpoint"]),
        model_source=job["spec"]["model"]["source"],
        n=len(rows),
        k=2,
        functions={FUNCTION: summarize(rows, FUNCTION)},
        primary=FUNCTION,
        generate_s=1.5,
        outcomes_file=layout.eval_outcomes,
    )
    service.emit(eval_id, "eval_report", report=report.model_dump(mode="json"))
    service.finish_process(eval_id, 0)
    service.wait_for_phase(eval_id, "SUCCEEDED")


def _submit_eval(service: LiveService, name: str, baseline: str | None = None) -> str:
    body = {"checkpoint": MODEL, "suite": {"name": "arith"}, "output": str(service.runs_dir), "name": name, "baseline": baseline}
    with service.api() as client:
        response = client.post("/v1/evals", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _eval(service: LiveService, eval_id: str) -> dict[str, Any]:
    with service.api() as client:
        return dict(client.get(f"/v1/evals/{eval_id}").raise_for_status().json())


# The words the dashboard writes, as `rljob` prints them (service/cli/output.py), from the API's numbers.
def _pct(x: float) -> int:
    return math.floor(x * 100 + 0.5)


def _signed(points: int, plus: str = "") -> str:
    return f"{MINUS}{-points}" if points < 0 else f"{plus}{points}"


def _estimate(e: dict[str, Any]) -> str:
    return f"{_pct(e['value'])}% [{_pct(e['ci95'][0])}–{_pct(e['ci95'][1])}]"


def _difference(d: dict[str, Any]) -> str:
    low, high = d["ci95"]
    return f"{_signed(_pct(d['difference']), '+')} points [{_signed(_pct(low))}, {_signed(_pct(high))}]"


def _p(d: dict[str, Any]) -> str:
    return "—" if d["mcnemar_p"] is None else f"p={d['mcnemar_p']:.2g}"


def _bars(plot: Locator) -> dict[str, dict[str, float]]:
    """Each drawn row of an interval plot: the numbers it carries, its bar's ends and its dot, in SVG units."""
    drawn: list[dict[str, Any]] = plot.locator("g.interval").evaluate_all(
        """gs => gs.map(g => ({
            label: g.dataset.label, value: +g.dataset.value, low: +g.dataset.low, high: +g.dataset.high,
            x1: +g.querySelector('line.errbar').getAttribute('x1'), x2: +g.querySelector('line.errbar').getAttribute('x2'),
            dot: +g.querySelector('circle').getAttribute('cx'), caps: g.querySelectorAll('line.errbar-cap').length,
        }))"""
    )
    return {d.pop("label"): d for d in drawn}


def _check_bars(plot: Locator, expected: dict[str, tuple[float, tuple[float, float]]]) -> None:
    """The plot draws one capped bar per expected row, spanning the API's interval on one linear axis."""
    bars = _bars(plot)
    assert list(bars) == list(expected), bars
    scales = []
    for label, (value, (low, high)) in expected.items():
        bar = bars[label]
        assert (bar["value"], bar["low"], bar["high"]) == pytest.approx((value, low, high)), label
        assert bar["caps"] == 2 and bar["x1"] <= bar["dot"] <= bar["x2"], (label, bar)
        if high - low > 1e-9:
            scales.append((bar["x2"] - bar["x1"]) / (high - low))
            assert bar["dot"] - bar["x1"] == pytest.approx((value - low) * scales[-1], abs=1e-6), label
    assert scales and max(scales) == pytest.approx(min(scales), rel=1e-6), scales  # one axis for every bar


def test_an_eval_jobs_page_its_comparison_and_the_compare_view(page: Page, live_service: LiveService) -> None:
    base = _submit_eval(live_service, "base-eval")
    _finish_eval(live_service, base, [1, 0, 0, 1, 0, 0, 1, 0, 0, 0])
    tuned = _submit_eval(live_service, "tuned-eval", baseline=base)
    _finish_eval(live_service, tuned, [1, 1, 1, 1, 0, 1, 1, 0, 1, 0])
    changed = _submit_eval(live_service, "changed-suite-eval", baseline=base)
    _finish_eval(live_service, changed, [1, 1, 1, 1, 0, 1, 1, 0, 1, 0], content_hash=HASH_V2)
    shown = _eval(live_service, tuned)
    summary, comparison = shown["eval_job"], shown["comparison"]
    assert comparison is not None, shown["comparison_note"]

    open_signed_in(page, live_service, f"#/jobs/{tuned}")
    section = page.get_by_test_id("eval-job")
    expect(section).to_have_attribute("data-phase", "SUCCEEDED", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator(".learning")).to_be_hidden()  # an eval job trains nothing: no reward curves
    expect(section.get_by_test_id("checkpoint")).to_have_text("checkpoint location")
    expect(section.get_by_test_id("model-source")).to_have_text(MODEL)
    expect(section.get_by_test_id("suite")).to_have_text(f"arith v1 · hash {HASH_V1}")
    expect(section.get_by_test_id("n")).to_have_text("n=10")
    expect(section.get_by_test_id("k")).to_have_text("k=2")
    expect(section.get_by_test_id("usage")).to_contain_text("chip-hours billed · $0.00 at list price")

    # Every score of the reward function with the API's value and 95% interval, in words and drawn.
    scores = summary["scores"][FUNCTION]
    block = section.locator(f'.eval-function[data-function="{FUNCTION}"]')
    for name in SCORES:
        expect(block.locator(f'table tr[data-score="{name}"] td').first).to_have_text(_estimate(scores[name]))
    _check_bars(block.get_by_test_id("scores-plot"), {name: (scores[name]["value"], tuple(scores[name]["ci95"])) for name in SCORES})

    # Against its baseline: each paired difference with its bootstrap interval and McNemar's p, as the API gives them.
    compared = section.get_by_test_id("comparison")
    differences = {d["score"]: d for d in comparison["comparison"]["scores"]}
    for name, d in differences.items():
        row = compared.locator(f'[data-testid="differences"] tr[data-score="{name}"]')
        expect(row.get_by_test_id("difference")).to_have_text(_difference(d))
        expect(row.get_by_test_id("mcnemar")).to_have_text(_p(d))
    assert _difference(differences["pass@1"]) == "+40 points [10, 70]" and _p(differences["pass@1"]) == "p=0.12"  # 4 rows only a got right
    _check_bars(compared.get_by_test_id("differences-plot"), {name: (d["difference"], tuple(d["ci95"])) for name, d in differences.items()})
    expect(compared.get_by_test_id("cost-note")).to_have_text(f"No cost per point: {comparison['cost_note']}.")
    shoot(page, "eval-job")

    # A baseline on another version of the suite: no comparison, and the service's reason.
    note = _eval(live_service, changed)["comparison_note"]
    assert "different suite versions cannot be compared" in note
    page.evaluate(f"location.hash = '#/jobs/{changed}'")
    expect(page.get_by_test_id("eval-job").get_by_test_id("comparison-note")).to_have_text(note, timeout=LIVE_TIMEOUT_MS)
    expect(page.get_by_test_id("eval-job").get_by_test_id("comparison")).to_have_count(0)

    # The compare view: both side by side and a - b; then two evals picked that the service refuses to compare.
    page.evaluate(f"location.hash = '#/jobs/{tuned}'")
    page.get_by_role("link", name="open both in the compare view").click()
    expect(page).to_have_url(re.compile(re.escape(f"#/evals/diff/{tuned}/{base}") + "$"))
    sides = page.get_by_test_id("sides")
    base_scores = _eval(live_service, base)["eval_job"]["scores"][FUNCTION]
    for name in SCORES:
        expect(sides.locator(f'tr[data-row^="{name}"] td')).to_have_text([_estimate(scores[name]), _estimate(base_scores[name])])
    expect(sides.locator('tr[data-row="Suite"] td')).to_have_text([f"arith v1 · hash {HASH_V1}"] * 2)
    shoot(page, "eval-compare")
    expect(page.get_by_test_id("comparison").locator('tr[data-score="pass@1"]').get_by_test_id("difference")).to_have_text(
        _difference(differences["pass@1"])
    )
    page.locator("#eval-a").select_option(changed)
    page.get_by_role("button", name="Compare").click()
    expect(page).to_have_url(re.compile(re.escape(f"#/evals/diff/{changed}/{base}") + "$"))
    with live_service.api() as client:
        refused = client.get(f"/v1/evals/{changed}/compare", params={"baseline": base})
    assert refused.status_code == 409
    expect(page.get_by_test_id("not-comparable")).to_contain_text(refused.json()["detail"], timeout=LIVE_TIMEOUT_MS)
    expect(page.get_by_test_id("comparison")).to_have_count(0)
    expect(page.get_by_test_id("sides").locator('tr[data-row="Suite"] td')).to_have_text(
        [f"arith v2 · hash {HASH_V2}", f"arith v1 · hash {HASH_V1}"]
    )


TRAINING = {"num_batches": 4, "checkpoint_period": 2, "num_test_batches": 0}
GREEDY = {"base": [0] * 6 + [1] * 4, "step-2": [1] * 5 + [0] * 5, "step-4": [1] * 7 + [0] * 3, "export": [1] * 9 + [0]}


def test_a_training_jobs_attached_evaluations_with_their_difference_from_base(page: Page, live_service: LiveService) -> None:
    spec = {
        "name": "trained",
        "model": {"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B-Instruct"},
        "grpo": TRAINING,
        "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        "output": str(live_service.runs_dir),
        "eval": {"suite": {"name": "arith"}},
    }
    with live_service.api() as client:
        response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    live_service.wait_for_phase(job_id, "RUNNING")
    layout = RunLayout(str(live_service.runs_dir), job_id)
    for step in (2, 4):
        live_service.emit(job_id, "checkpoint", step=step, params=f"{layout.actor_checkpoints}/{step}/model_params")
    live_service.emit(job_id, "artifact", name="export.export", uri=layout.export_dir)
    live_service.finish_process(job_id, 0)
    live_service.wait_for_phase(job_id, "SUCCEEDED")
    made = _wait_for(lambda: live_service.job(job_id)["attached_evals"], lambda evals: len(evals) == 4 and all(e["eval_id"] for e in evals))
    ids = {e["label"]: e["eval_id"] for e in made}
    for label, greedy in GREEDY.items():
        _finish_eval(live_service, ids[label], greedy)
    evals = _wait_for(
        lambda: live_service.job(job_id)["attached_evals"],
        lambda evals: all(e["phase"] == "SUCCEEDED" and (e["label"] == "base" or e["vs_base"]) for e in evals),
    )

    # The board tells the kinds apart; two ticked eval jobs open the eval compare view (newer minus older).
    open_signed_in(page, live_service, "#/")
    expect(page.locator(f'tr[data-job-id="{job_id}"] [data-testid="kind"]')).to_have_text("train", timeout=LIVE_TIMEOUT_MS)
    for eval_id in ids.values():
        expect(page.locator(f'tr[data-job-id="{eval_id}"] [data-testid="kind"]')).to_have_attribute("data-kind", "eval")
    page.locator(f'tr[data-job-id="{ids["base"]}"] input.pick').check()
    page.locator(f'tr[data-job-id="{ids["export"]}"] input.pick').check()
    page.get_by_role("button", name="Compare").click()
    expect(page).to_have_url(re.compile(re.escape(f"#/evals/diff/{ids['export']}/{ids['base']}") + "$"))

    # The training job's page: one row per eval job in checkpoint order, the API's scores and differences from base.
    page.evaluate(f"location.hash = '#/jobs/{job_id}'")
    panel = page.get_by_test_id("attached-evals")
    table = panel.get_by_test_id("attached-table")
    expect(table.locator("tbody tr")).to_have_count(4, timeout=LIVE_TIMEOUT_MS)
    assert table.locator("tbody tr").evaluate_all("trs => trs.map(tr => tr.dataset.label)") == ["base", "step-2", "step-4", "export"]
    for e in evals:
        row = table.locator(f'tr[data-label="{e["label"]}"]')
        expect(row.get_by_role("link", name=e["eval_id"])).to_have_attribute("href", f"#/jobs/{e['eval_id']}")
        for name in SCORES:
            expect(row.locator(f'td[data-score="{name}"]')).to_have_text(_estimate(e["scores"][name]))
        if e["label"] == "base":
            expect(row.get_by_test_id("vs-base")).to_have_text("(the base)")
            continue
        pass1 = next(d for d in e["vs_base"]["scores"] if d["score"] == "pass@1")
        expect(row.get_by_test_id("vs-base")).to_contain_text(_difference(pass1))
        expect(row.get_by_test_id("mcnemar")).to_have_text(_p(pass1))
    _check_bars(
        panel.get_by_test_id("attached-plot"),
        {e["label"]: (e["scores"]["pass@1"]["value"], tuple(e["scores"]["pass@1"]["ci95"])) for e in evals},
    )
    vs_base = {e["label"]: next(d for d in e["vs_base"]["scores"] if d["score"] == "pass@1") for e in evals if e["vs_base"]}
    _check_bars(panel.get_by_test_id("attached-diff-plot"), {label: (d["difference"], tuple(d["ci95"])) for label, d in vs_base.items()})
    shoot(page, "job-attached-evals")

    # Its export's eval job: what it evaluated, the job it came from, and the training job's cost per point.
    table.locator('tr[data-label="export"]').get_by_role("link", name=ids["export"]).click()
    section = page.get_by_test_id("eval-job")
    expect(section.get_by_test_id("checkpoint")).to_have_text(f"export of {job_id}", timeout=LIVE_TIMEOUT_MS)
    expect(section.get_by_test_id("training-job")).to_have_attribute("href", f"#/jobs/{job_id}")
    expect(section.get_by_test_id("baseline")).to_have_text(ids["base"])
    costs = _eval(live_service, ids["export"])["comparison"]["cost_per_point"]
    assert [c["score"] for c in costs] == ["pass@1", "sampled"]
    expect(section.get_by_test_id("cost-per-point").locator("li")).to_have_text([f"Training job {job_id}: {c['verdict']}" for c in costs])
