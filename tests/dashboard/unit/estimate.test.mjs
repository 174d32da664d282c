// The job page's estimate beside the actuals (dashboard/src/estimate.js), from JobPublic.estimate and .estimate_actuals.
import assert from "node:assert/strict";
import { test } from "node:test";
import { estimateView, verdictText } from "../../../dashboard/src/estimate.js";
import { jobView } from "../../../dashboard/src/model.js";

const ESTIMATE = {
  made_at: "2026-03-01T12:00:00Z",
  basis: "history",
  basis_detail: "2 finished jobs of the same shape",
  history_job_ids: ["rl-bbbbbbbbbbbb", "rl-aaaaaaaaaaaa"],
  queue_position: 0,
  wait_s: { expected: 0, low: 0, high: 0 },
  run_s: { expected: 75, low: 50, high: 120 },
  run_parts_s: { other: 75 },
  wall_s: { expected: 75, low: 50, high: 120 },
  chip_hours: { expected: 0, low: 0, high: 0 },
  cost_usd: null,
  storage_bytes: 1536,
};
const ACTUALS = {
  wait_s: { actual: 0.2, expected: 0, within: false },
  run_s: { actual: 80, expected: 75, within: true },
  wall_s: { actual: 80.2, expected: 75, within: true },
  chip_hours: { actual: 0, expected: 0, within: true },
  cost_usd: { actual: 0, expected: null, within: null },
  storage_bytes: { actual: 2048, expected: 1536, within: true },
};

test("no estimate, no view (jobs submitted before estimates)", () => {
  assert.equal(estimateView(null, null), null);
  assert.equal(estimateView({}, null), null);
  assert.equal(jobView({ id: "rl-x", spec: {} }).estimate, null);
});

test("a running job: expected and range of each figure, no actuals", () => {
  const view = estimateView(ESTIMATE, null);
  assert.equal(view.basis, "history");
  assert.deepEqual(view.historyIds, ["rl-bbbbbbbbbbbb", "rl-aaaaaaaaaaaa"]);
  assert.equal(view.queuePosition, 0);
  assert.equal(view.ended, false);
  const wall = view.rows.find((row) => row.key === "wall_s");
  assert.deepEqual(wall, { key: "wall_s", label: "Wall", expected: "1m 15s", range: "50s – 2m 0s", actual: null, within: null });
  const cost = view.rows.find((row) => row.key === "cost_usd");
  assert.equal(cost.expected, "—"); // no price for this capacity
  assert.equal(view.rows.find((row) => row.key === "storage_bytes").expected, "1.5 KiB");
});

test("an ended job: each actual beside its estimate, inside or outside the range", () => {
  const view = jobView({ id: "rl-x", spec: {}, estimate: ESTIMATE, estimate_actuals: ACTUALS }).estimate;
  assert.equal(view.ended, true);
  const byKey = Object.fromEntries(view.rows.map((row) => [row.key, row]));
  assert.equal(byKey.wall_s.actual, "1m 20s");
  assert.equal(verdictText(byKey.wall_s), "inside");
  assert.equal(verdictText(byKey.wait_s), "outside");
  assert.equal(verdictText(byKey.cost_usd), "");
  assert.equal(byKey.storage_bytes.actual, "2.0 KiB");
});
