// Eval jobs' pure parts: the words for an eval job's scores, a comparison and a training job's attached evals
// (evaljobs.js), the compare view's route, and where an interval plot draws each estimate (intervalplot.js).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  attachedRows, checkpointText, comparisonRows, estimateText, evalDiffHref, evalDiffRoute, evalSummaryView, functionOrder,
  mcnemarText, primaryPassAt1, pValueText, scoreDifferenceText, suiteText, usageText,
} from "../../../dashboard/src/evaljobs.js";
import { fmtDuration } from "../../../dashboard/src/format.js";
import { INTERVAL_PLOT, intervalLayout } from "../../../dashboard/src/intervalplot.js";
import { jobView } from "../../../dashboard/src/model.js";

const est = (value, low, high, method = "wilson") => ({ value, ci95: [low, high], method });
const SCORES = { "pass@1": est(0.7, 0.3968, 0.8922), sampled: est(0.55, 0.35, 0.75, "bootstrap"), "pass@k": est(0.8, 0.49, 0.943), "maj@k": est(0.3, 0.108, 0.603) };
const SUITE = { name: "arith", scope: "builtin", version: 1, content_hash: "0123456789abcdef", rows: 10, reward_functions: ["exact"], sampling: { samples: 4, temperature: 0.9, top_k: 50, max_new_tokens: 256, seed: 1 } };
const SUMMARY = {
  checkpoint: { format: "huggingface", params: null, job_id: "rl-aaaaaaaaaaaa", label: "export" }, model_source: "/runs/rl-aaaaaaaaaaaa/export",
  suite: SUITE, baseline: "rl-bbbbbbbbbbbb", n: 10, k: 2, primary: "exact", scores: { format: SCORES, exact: SCORES }, generate_s: 1.5,
};
const diff = (score, difference, low, high, p, aOnly = null, bOnly = null) => ({ score, a: 0.7, b: 0.3, difference, ci95: [low, high], mcnemar_p: p, a_only: aOnly, b_only: bOnly });
const COMPARISON = {
  function: "exact", n: 10, resamples: 10000, seed: 1,
  scores: [diff("maj@k", 0, 0, 0, 1, 0, 0), diff("pass@1", 0.4, 0.1, 0.7, 0.125, 4, 0), diff("sampled", -0.05, -0.2, 0.1, null)],
};

test("the route is #/evals/diff/A/B, with one or no side left to pick; ids percent-encoded both ways", () => {
  assert.deepEqual(evalDiffRoute("/evals/diff/rl-a/rl-b"), { a: "rl-a", b: "rl-b" });
  assert.deepEqual(evalDiffRoute("/evals/diff/rl-a"), { a: "rl-a", b: null });
  assert.deepEqual(evalDiffRoute("/evals/diff"), { a: null, b: null });
  assert.equal(evalDiffRoute("/evals/diff/a/b/c"), null);
  assert.equal(evalDiffRoute("/diff/a/b"), null); // the run diff's
  assert.equal(evalDiffHref("rl-a", "x/y"), "#/evals/diff/rl-a/x%2Fy");
  assert.deepEqual(evalDiffRoute(evalDiffHref("rl-a", "x/y").slice(1)), { a: "rl-a", b: "x/y" });
  assert.equal(evalDiffHref("rl-a", null), "#/evals/diff/rl-a");
  assert.equal(evalDiffHref(null, "rl-b"), "#/evals/diff");
});

test("an estimate: whole percents, its 95% interval half up as the CLI prints it; dashes for unknowns", () => {
  assert.equal(estimateText(SCORES["pass@1"]), "70% [40–89]");
  assert.equal(estimateText(est(0.125, 0.005, 0.9999999999999999)), "13% [1–100]");
  assert.equal(estimateText({ value: 0.5, ci95: null }), "50%");
  assert.equal(estimateText(null), "—");
  assert.equal(estimateText({ value: "0.5" }), "—");
});

test("McNemar's p is Python's format(p, '.2g'): ties to even on the double's exact value, exponent below 1e-4", () => {
  // Each pair was printed by Python 3.12: f"{p:.2g}".
  const python = [
    [0.125, "0.12"], [0.0625, "0.062"], [1, "1"], [0.5078125, "0.51"], [1e-5, "1e-05"], [3.0517578125e-05, "3.1e-05"],
    [0.03125, "0.031"], [0.995, "0.99"], [0.999, "1"], [0.00015, "0.00015"], [0.000125, "0.00013"], [0.0001, "0.0001"],
    [0.35, "0.35"], [0.021484375, "0.021"], [1.9073486328125e-06, "1.9e-06"], [0.0009765625, "0.00098"], [0, "0"],
  ];
  for (const [p, text] of python) assert.equal(pValueText(p), text, String(p));
  assert.equal(pValueText(null), "—");
  assert.equal(mcnemarText({ mcnemar_p: 0.125 }), "p=0.12");
  assert.equal(mcnemarText({ mcnemar_p: null }), null); // sampled accuracy has no McNemar test
});

test("a paired difference: signed whole points with signed bounds (a real minus sign)", () => {
  assert.equal(scoreDifferenceText(diff("pass@1", 0.4, 0.1, 0.7, 0.125)), "+40 points [10, 70]");
  assert.equal(scoreDifferenceText(diff("sampled", -0.05, -0.2, 0.1, null)), "−5 points [−20, 10]");
  assert.equal(scoreDifferenceText(null), "—");
});

test("an eval job's summary: checkpoint, suite version and hash, n and k, the primary function first", () => {
  const view = evalSummaryView(SUMMARY);
  assert.equal(view.checkpointText, "export of rl-aaaaaaaaaaaa");
  assert.equal(view.trainingJob, "rl-aaaaaaaaaaaa");
  assert.equal(view.suiteText, "arith v1 · hash 0123456789abcdef");
  assert.deepEqual([view.n, view.k, view.reported], [10, 2, true]);
  assert.deepEqual(view.functions.map((f) => [f.name, f.primary]), [["exact", true], ["format", false]]);
  assert.deepEqual(view.functions[0].rows.map((r) => [r.score, r.text, r.method]), [
    ["pass@1", "70% [40–89]", "wilson"], ["sampled", "55% [35–75]", "bootstrap"], ["pass@k", "80% [49–94]", "wilson"], ["maj@k", "30% [11–60]", "wilson"],
  ]);
  const waiting = evalSummaryView({ ...SUMMARY, suite: { ...SUITE, version: null, content_hash: null }, n: null, scores: {} });
  assert.equal(waiting.suiteText, "arith not versioned yet");
  assert.equal(waiting.reported, false);
  assert.equal(checkpointText({ label: "location", job_id: null }), "checkpoint location");
  assert.equal(checkpointText({ label: "step-20", job_id: "rl-x" }), "step-20 of rl-x");
  assert.equal(suiteText(null), "—");
  assert.deepEqual(functionOrder({ b: {}, a: {} }, "z"), ["a", "b"]);
});

test("the job list's view: an eval job is kind eval with its primary pass@1 as accuracy; a training job kind train", () => {
  const evalJob = jobView({ id: "rl-e", phase: "SUCCEEDED", eval_job: SUMMARY, metrics: { eval_accuracy: 0.1 }, spec: { evaluation: {} } });
  assert.equal(evalJob.kind, "eval");
  assert.equal(evalJob.evalAccuracy, 0.7);
  assert.deepEqual(evalJob.stages.map((s) => s.stage), ["export", "evaluate"]);
  const training = jobView({ id: "rl-t", phase: "RUNNING", metrics: { eval_accuracy: 0.1 }, attached_evals: [{ label: "base" }], spec: {} });
  assert.equal(training.kind, "train");
  assert.equal(training.evalAccuracy, 0.1);
  assert.equal(training.attachedEvals.length, 1);
  assert.deepEqual(training.stages.map((s) => s.stage), ["convert", "train", "export"]);
  assert.equal(primaryPassAt1({ ...SUMMARY, scores: {} }), null);
});

test("JobPublic's eval fields by their one name each: the removed ones (eval, evaluation, evals) are not read", () => {
  const named = jobView({ id: "rl-e", phase: "SUCCEEDED", eval_job: SUMMARY, metrics: {}, spec: {} });
  assert.equal(named.kind, "eval");
  assert.equal(named.evalAccuracy, 0.7);
  const attached = jobView({ id: "rl-t", phase: "RUNNING", metrics: {}, attached_evals: [{ label: "base" }, { label: "step-2" }], spec: {} });
  assert.equal(attached.kind, "train");
  assert.equal(attached.attachedEvals.length, 2);
  const old = jobView({ id: "rl-t", phase: "RUNNING", metrics: {}, evaluation: SUMMARY, evals: [{ label: "base" }], spec: {} });
  assert.equal(old.kind, "train");
  assert.equal(old.attachedEvals.length, 0);
});

test("a comparison's rows in score order, with the service's numbers in words", () => {
  const rows = comparisonRows(COMPARISON);
  assert.deepEqual(rows.map((r) => r.score), ["pass@1", "sampled", "maj@k"]);
  assert.deepEqual(rows.map((r) => [r.text, r.p, r.onlyA, r.onlyB]), [
    ["+40 points [10, 70]", "p=0.12", 4, 0], ["−5 points [−20, 10]", null, null, null], ["+0 points [0, 0]", "p=1", 0, 0],
  ]);
  assert.deepEqual(comparisonRows(null), []);
});

test("attached evals: base, steps ascending, export; scores and the change from base; notes kept", () => {
  const vsBase = { ...COMPARISON };
  const rows = attachedRows([
    { label: "export", eval_id: "rl-x", phase: "SUCCEEDED", suite_version: 1, function: "exact", scores: SCORES, vs_base: vsBase },
    { label: "step-10", step: 10, eval_id: "rl-10", phase: "RUNNING", suite_version: null, scores: null, vs_base: null },
    { label: "step-2", step: 2, eval_id: null, note: "job rl-t saved no actor checkpoint at step 2" },
    { label: "base", eval_id: "rl-b", phase: "SUCCEEDED", suite_version: 1, function: "exact", scores: SCORES, vs_base: null },
  ]);
  assert.deepEqual(rows.map((r) => r.label), ["base", "step-2", "step-10", "export"]);
  assert.equal(rows[3].vsBase.text, "+40 points [10, 70]");
  assert.equal(rows[3].vsBase.p, "p=0.12");
  assert.equal(rows[3].scores[0].text, "70% [40–89]");
  assert.equal(rows[1].note, "job rl-t saved no actor checkpoint at step 2");
  assert.equal(rows[2].scores, null);
});

test("usage in words: running time, billed chip-hours, cost at list price or why there is none", () => {
  const usage = { accelerator: "cpu", phases: { RUNNING: { seconds: 65 }, QUEUED: { seconds: 100 } }, billed_chip_hours: 0, cost_usd: 0 };
  assert.equal(usageText(usage, fmtDuration), "running 1m 5s on cpu · 0.00 chip-hours billed · $0.00 at list price");
  assert.match(usageText({ ...usage, cost_usd: null }, fmtDuration), /no price for this hardware$/);
});

test("interval plot: scores on 0–100%, each bar spans its interval exactly, one row per estimate", () => {
  const rows = [{ label: "pass@1", value: 0.7, ci95: [0.4, 0.9] }, { label: "maj@k", value: 0.3, ci95: [0.1, 0.6] }, { label: "none", value: null, ci95: null }];
  const g = intervalLayout(rows);
  const { area } = g;
  const xOf = (v) => area.left + v * (area.right - area.left);
  assert.equal(g.marks.length, 2); // a row without a value is not drawn
  for (const [mark, row] of [[g.marks[0], rows[0]], [g.marks[1], rows[1]]]) {
    assert.ok(Math.abs(mark.x - xOf(row.value)) < 1e-9);
    assert.ok(Math.abs(mark.xLow - xOf(row.ci95[0])) < 1e-9);
    assert.ok(Math.abs(mark.xHigh - xOf(row.ci95[1])) < 1e-9);
  }
  assert.ok(g.marks[0].y < g.marks[1].y);
  assert.equal(g.height, INTERVAL_PLOT.top + INTERVAL_PLOT.bottom + 2 * INTERVAL_PLOT.rowHeight);
  assert.deepEqual(g.ticks.map((t) => t.text), ["0%", "25%", "50%", "75%", "100%"]);
  assert.equal(g.zeroX, null);
});

test("interval plot: differences on an axis symmetric around a marked zero, out to the widest interval", () => {
  const g = intervalLayout([{ label: "pass@1", value: 0.4, ci95: [0.1, 0.7] }, { label: "sampled", value: -0.05, ci95: [-0.2, 0.1] }], { kind: "difference" });
  assert.deepEqual(g.domain, [-0.7, 0.7]);
  assert.equal(g.zeroX, (g.area.left + g.area.right) / 2);
  assert.deepEqual(g.ticks.map((t) => t.text), ["−50", "−25", "0", "+25", "+50"]);
  assert.ok(g.marks[1].xLow < g.zeroX && g.zeroX < g.marks[1].xHigh); // an interval across zero is drawn across it
  const small = intervalLayout([{ label: "x", value: 0.01, ci95: [-0.02, 0.03] }], { kind: "difference" });
  assert.deepEqual(small.domain, [-0.1, 0.1]);
  assert.deepEqual(small.ticks.map((t) => t.text), ["−10", "−5", "0", "+5", "+10"]);
});
