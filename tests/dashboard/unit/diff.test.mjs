// The run diff's pure parts (diffmodel.js): its route, the differences and outcomes as the service
// gives them (GET /v1/jobs/diff), and two runs' series merged onto one chart's axes.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  differenceRows, diffHref, diffRoute, jobLabel, outcomeRows, overlayEvals, overlaySteps, valueText,
} from "../../../dashboard/src/diffmodel.js";
import { evalPlotLayout } from "../../../dashboard/src/evalplot.js";
import { evalView } from "../../../dashboard/src/model.js";

const outcome = (id, name, extra = {}) => ({
  job_id: id, name, phase: "SUCCEEDED", final_reward: 0.61, best_reward: 0.7, best_reward_step: 8,
  eval_before: { label: "before", step: 0, n: 300, accuracy: 0.34, ci95: [0.289, 0.395] },
  eval_after: { label: "after", step: 20, n: 300, accuracy: 0.51, ci95: [0.454, 0.566] },
  eval_difference: { of: "after", difference: 0.17, ci95: [0.119, 0.22], n: 300, improved: 60, regressed: 9, method: "newcombe-paired-wilson" },
  steps: 10, total_steps: 10, wall_s: 125.0, chip_hours: 0.0347, cost_usd: 1.5, ...extra,
});
const DIFF = {
  a: "rl-aaaaaaaaaaaa", b: "rl-bbbbbbbbbbbb",
  spec: [{ key: "grpo.learning_rate", a: 1e-6, b: 3e-6 }, { key: "grpo.beta", a: null, b: 0.04 }],
  record: { versions: [{ key: "versions.jax", a: "0.4.30", b: "0.4.31" }], hardware: [] },
  missing_records: [],
  outcomes: [outcome("rl-aaaaaaaaaaaa", "lr-low"), outcome("rl-bbbbbbbbbbbb", "lr-high", { eval_before: null, eval_difference: null, cost_usd: null, total_steps: null })],
};

test("the route is #/diff/A/B, ids percent-encoded both ways", () => {
  assert.deepEqual(diffRoute("/diff/rl-aaaaaaaaaaaa/rl-bbbbbbbbbbbb"), { a: "rl-aaaaaaaaaaaa", b: "rl-bbbbbbbbbbbb" });
  assert.equal(diffHref("rl-a", "x/y"), "#/diff/rl-a/x%2Fy");
  assert.deepEqual(diffRoute(diffHref("rl-a", "x/y").slice(1)), { a: "rl-a", b: "x/y" });
  assert.equal(diffRoute("/diff/rl-a"), null);
  assert.equal(diffRoute("/diff/rl-a/rl-b/extra"), null);
  assert.equal(diffRoute("/jobs/rl-a"), null);
});

test("differences: spec keys first, then record sections in the service's order, values as text", () => {
  assert.deepEqual(differenceRows(DIFF), [
    { section: "spec", key: "grpo.learning_rate", a: "0.000001", b: "0.000003" },
    { section: "spec", key: "grpo.beta", a: "(absent)", b: "0.04" },
    { section: "versions", key: "versions.jax", a: "0.4.30", b: "0.4.31" },
  ]);
  assert.deepEqual(differenceRows({ spec: [], record: {} }), []);
  assert.equal(valueText("cpu"), "cpu"); // strings unquoted, as `rljob diff` prints them
  assert.equal(valueText(["a", 1]), '["a",1]');
  assert.equal(valueText(false), "false");
});

test("outcomes side by side: the service's numbers, eval with its 95% interval, dashes for unknowns", () => {
  const rows = Object.fromEntries(outcomeRows(DIFF.outcomes).map((r) => [r.label, r.values]));
  assert.deepEqual(rows["Final reward"], ["0.61", "0.61"]);
  assert.deepEqual(rows["Best reward"], ["0.7 at step 8", "0.7 at step 8"]);
  assert.deepEqual(rows["Eval before [95% CI]"], ["34% [29–40]", "—"]);
  assert.deepEqual(rows["Eval after [95% CI]"], ["51% [45–57]", "51% [45–57]"]);
  assert.deepEqual(rows["Eval change [95% CI]"], ["+17 points [12, 22] (60 improved, 9 regressed)", "—"]);
  assert.deepEqual(rows.Steps, ["10 / 10", "10"]);
  assert.deepEqual(rows["Wall time"], ["2m 5s", "2m 5s"]);
  assert.deepEqual(rows["Cost (list price)"], ["$1.50", "—"]);
  assert.equal(jobLabel(DIFF.outcomes[0]), "lr-low (rl-aaaaaaaaaaaa)");
  assert.equal(jobLabel({ job_id: "rl-x", name: "rl-x" }), "rl-x");
});

test("two runs' curves share one step axis; a step one run lacks is a gap in its series", () => {
  const merged = overlaySteps([
    { id: "a", label: "A", steps: [1, 2, 3], values: [0.1, 0.2, 0.3] },
    { id: "b", label: "B", steps: [2, 4], values: [0.5, 0.6] },
  ]);
  assert.deepEqual(merged.steps, [1, 2, 3, 4]);
  assert.deepEqual(merged.series.map((s) => [s.index, s.label, s.points, s.values]), [
    [0, "A", 3, [0.1, 0.2, 0.3, null]],
    [1, "B", 2, [null, 0.5, null, 0.6]],
  ]);
  assert.deepEqual(merged.absent, []);
});

test("a run with no metric points is absent, not an empty series, and the other keeps its colour index", () => {
  const merged = overlaySteps([
    { id: "a", label: "A", steps: [], values: [] },
    { id: "b", label: "B", steps: [1, 2], values: [null, 0.4] }, // a step without reward_mean is no point
  ]);
  assert.deepEqual(merged.steps, [2]);
  assert.deepEqual(merged.series.map((s) => [s.index, s.values, s.points]), [[1, [0.4], 1]]);
  assert.deepEqual(merged.absent, [{ id: "a", label: "A" }]);
  const none = overlaySteps([{ id: "a", label: "A", steps: [], values: [] }]);
  assert.deepEqual([none.steps, none.series], [[], []]);
});

test("two runs' evaluations: tagged by run, a run without evaluations named with the service's reason", () => {
  const ev = (points) => evalView({ status: "available", points, before: null, after: null, difference: null });
  const runs = overlayEvals([
    { id: "a", label: "A", trainEvals: ev([{ label: "before", step: 0, accuracy: 0.3, ci95: [0.25, 0.35] }, { label: "after", step: 10, accuracy: 0.5, ci95: [0.45, 0.55] }]) },
    { id: "b", label: "B", trainEvals: evalView({ status: "none", reason: "grpo.num_test_batches is 0", points: [] }) },
    { id: "c", label: "C", trainEvals: ev([{ label: "after", step: 10, accuracy: 0.4, ci95: null }]) },
  ]);
  assert.deepEqual(runs.points.map((p) => [p.series, p.job, p.label]), [[0, "A", "before"], [0, "A", "after"], [2, "C", "after"]]);
  assert.deepEqual(runs.series.map((s) => [s.index, s.label, s.points]), [[0, "A", 2], [2, "C", 1]]);
  assert.deepEqual(runs.absent, [{ id: "b", label: "B", reason: "grpo.num_test_batches is 0" }]);

  // On the shared plot the runs' points at one step sit side by side, each keeping its run.
  const g = evalPlotLayout(runs.points);
  assert.deepEqual(g.marks.map((m) => [m.series, m.job]), [[0, "A"], [0, "A"], [2, "C"]]);
  const [, aAfter, cAfter] = g.marks;
  assert.equal(aAfter.step, cAfter.step);
  assert.ok(aAfter.x < cAfter.x);
  assert.ok(cAfter.y > aAfter.y); // 40% is drawn lower than 50%
});
