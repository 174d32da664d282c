// The eval panel's pure parts: JobPublic.eval as the view model keeps it (model.js's evalView), the
// words it shows (evaltext.js) and where it draws each evaluation (evalplot.js).
import assert from "node:assert/strict";
import { test } from "node:test";
import { evalPlotLayout, PLOT_SIZE } from "../../../dashboard/src/evalplot.js";
import { differenceOf, differenceText, evalHeadline, latestPoint, methodText, pointText, wholePercent } from "../../../dashboard/src/evaltext.js";
import { evalView, jobView } from "../../../dashboard/src/model.js";

const point = (label, step, accuracy, ci95, n = 300) => ({
  label, step, n, accuracy, ci95, format_accuracy: 0.9, partial_accuracy: 0.4, mean_reward: accuracy,
  samples_per_row: 1, sampling: "greedy, pass",
});
const BEFORE = point("before", 0, 0.34, [0.29, 0.39]);
const STEP_10 = point("step-10", 10, 0.45, [0.394, 0.506]);
const AFTER = point("after", 20, 0.51, [0.45, 0.57]);
const DIFF = { of: "after", difference: 0.17, ci95: [0.11, 0.23], n: 300, improved: 60, regressed: 9, method: "newcombe-paired-wilson" };
const EVAL = { status: "available", reason: null, points: [BEFORE, STEP_10, AFTER], before: BEFORE, after: AFTER, difference: DIFF };

test("the view model keeps the service's points in order, renamed, with numbers checked", () => {
  const view = jobView({ id: "rl-x", phase: "RUNNING", train_evals: EVAL }).trainEvals;
  assert.equal(view.status, "available");
  assert.deepEqual(view.points.map((p) => p.label), ["before", "step-10", "after"]);
  assert.deepEqual(view.before, {
    label: "before", step: 0, n: 300, accuracy: 0.34, ci95: [0.29, 0.39], formatAccuracy: 0.9, partialAccuracy: 0.4,
    meanReward: 0.34, samplesPerRow: 1, sampling: "greedy, pass", scoredBy: "maxtext",
  });
  assert.deepEqual(view.difference, DIFF);
  const odd = evalView({ ...EVAL, points: [{ ...BEFORE, accuracy: "0.3", ci95: [0.1] }, { step: 3 }] });
  assert.equal(odd.points.length, 1); // a point without a label cannot be shown by name
  assert.equal(odd.points[0].accuracy, null);
  assert.equal(odd.points[0].ci95, null);
});

test("no eval: the reason is kept; 'available' with nothing drawable reads as none; no field is null", () => {
  const none = evalView({ status: "none", reason: "grpo.num_test_batches is 0: this job runs no evaluation", points: [], before: null, after: null, difference: null });
  assert.equal(none.status, "none");
  assert.equal(none.reason, "grpo.num_test_batches is 0: this job runs no evaluation");
  assert.equal(evalHeadline(none), null);
  assert.equal(evalView({ status: "available", points: [] }).status, "none");
  assert.equal(jobView({ id: "rl-x", phase: "QUEUED" }).trainEvals, null);
  assert.equal(evalHeadline(null), null);
});

test("headline: before → after with whole-percent Wilson intervals and n", () => {
  assert.equal(evalHeadline(evalView(EVAL)), "34% [29–39] → 51% [45–57], n=300");
  assert.equal(pointText(evalView(EVAL).points[1]), "45% [39–51]"); // 0.394 and 0.506 round half up
  assert.deepEqual([0.125, 0.625, 0.285].map(wholePercent), [13, 63, 28]); // as the CLI's whole_percent
});

test("headline: without `after` it compares with the newest step, and says which", () => {
  const running = evalView({ ...EVAL, points: [BEFORE, point("step-5", 5, 0.4, [0.35, 0.46]), STEP_10], after: null });
  assert.equal(latestPoint(running).label, "step-10");
  assert.equal(evalHeadline(running), "34% [29–39] → 45% [39–51] at step 10, n=300");
  const fewer = evalView({ ...EVAL, after: { ...AFTER, n: 280 } });
  assert.equal(evalHeadline(fewer), "34% [29–39] → 51% [45–57], n=300 → 280");
});

test("headline: a job scored by its own reward functions says so; MaxText's score, or no field, says nothing", () => {
  const rewards = (p) => ({ ...p, scored_by: "rewards" });
  const view = evalView({ ...EVAL, points: EVAL.points.map(rewards), before: rewards(BEFORE), after: rewards(AFTER) });
  assert.equal(evalHeadline(view), "34% [29–39] → 51% [45–57], n=300, scored by the job's rewards");
  assert.equal(evalHeadline(evalView({ ...EVAL, after: { ...AFTER, scored_by: "maxtext" } })), "34% [29–39] → 51% [45–57], n=300");
});

test("headline: a single evaluation is named by when it ran", () => {
  assert.equal(evalHeadline(evalView({ ...EVAL, points: [BEFORE], after: null, difference: null })), "34% [29–39] before training, n=300");
  const noBefore = evalView({ ...EVAL, points: [STEP_10], before: null, after: null, difference: null });
  assert.equal(evalHeadline(noBefore), "45% [39–51] at step 10, n=300");
});

test("the paired difference: signed whole points, signed bounds, the row counts", () => {
  const view = evalView(EVAL);
  assert.equal(differenceText(view.difference), "+17 points [11, 23] (60 improved, 9 regressed)");
  assert.equal(differenceOf(view.difference), "after − before");
  const worse = evalView({ ...EVAL, difference: { ...DIFF, of: "step-10", difference: -0.03, ci95: [-0.08, 0.021], improved: 4, regressed: 13 } });
  assert.equal(differenceText(worse.difference), "−3 points [−8, 2] (4 improved, 13 regressed)");
  assert.equal(differenceOf(worse.difference), "step 10 − before");
  assert.equal(differenceText(evalView({ ...EVAL, difference: null }).difference), null);
  assert.match(methodText(view.difference), /paired over the 300 rows .* Newcombe/);
  assert.match(methodText({ ...DIFF, method: "paired-t" }), /paired t interval/);
});

test("plot: x by step, y from 0, each bar spans its interval exactly", () => {
  const g = evalPlotLayout(evalView(EVAL).points);
  const { area } = g;
  const yOf = (v) => area.bottom - (v / 0.6) * (area.bottom - area.top); // top: 0.57 rounded up to 0.6
  const [before, mid, after] = g.marks;
  assert.equal(before.x, area.left);
  assert.equal(after.x, area.right);
  assert.equal(mid.x, (area.left + area.right) / 2); // step 10 of 0..20
  for (const [mark, p] of [[before, BEFORE], [mid, STEP_10], [after, AFTER]]) {
    assert.ok(Math.abs(mark.y - yOf(p.accuracy)) < 1e-9, mark.label);
    assert.ok(Math.abs(mark.yHigh - yOf(p.ci95[1])) < 1e-9, mark.label);
    assert.ok(Math.abs(mark.yLow - yOf(p.ci95[0])) < 1e-9, mark.label);
    assert.ok(mark.yHigh < mark.y && mark.y < mark.yLow); // SVG's y grows downwards
  }
  assert.deepEqual(g.yTicks.map((t) => t.text), ["0%", "25%", "50%"]);
  assert.equal(g.yTicks[0].y, area.bottom);
  assert.deepEqual(g.xTicks.map((t) => t.step), [0, 10, 20]);
});

test("plot: an eval at the last step and `after` at that same step sit side by side", () => {
  const g = evalPlotLayout(evalView({ ...EVAL, points: [BEFORE, point("step-20", 20, 0.5, [0.44, 0.56]), AFTER] }).points);
  const [, step20, after] = g.marks;
  assert.ok(step20.x < after.x);
  assert.equal((step20.x + after.x) / 2, g.area.right);
});

test("plot: one point is centred; a low accuracy gets a short axis; no interval draws no bar", () => {
  const low = { ...BEFORE, accuracy: 0.02, ci95: [0.01, 0.04] };
  const g = evalPlotLayout(evalView({ ...EVAL, points: [low] }).points);
  assert.equal(g.marks[0].x, (PLOT_SIZE.left + PLOT_SIZE.width - PLOT_SIZE.right) / 2);
  assert.deepEqual(g.yTicks.map((t) => t.text), ["0%", "5%", "10%"]);
  const bare = evalPlotLayout([{ label: "before", step: 0, accuracy: 0.5, ci95: null }]);
  assert.equal(bare.marks[0].yLow, bare.marks[0].yHigh);
  assert.deepEqual(evalPlotLayout([{ label: "after", step: null, accuracy: 0.5, ci95: null }]).marks, []);
});
