// The team usage view's model (dashboard/src/usage.js) on GET /v1/usage answers shaped as the service sends them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { DASH } from "../../../dashboard/src/format.js";
import { fmtChipHours, fmtUsd, sinceForDays, usageView } from "../../../dashboard/src/usage.js";

const amount = (seconds, chips) => ({ seconds, chip_hours: (chips * seconds) / 3600 });
const phases = (chips, { queued = 0, launching = 0, running = 0, cancelling = 0 }) => ({
  QUEUED: amount(queued, chips), LAUNCHING: amount(launching, chips), RUNNING: amount(running, chips), CANCELLING: amount(cancelling, chips),
});
const sum = (jobs, waiting, billed, cost, unpriced = 0) => ({
  jobs, chip_hours: { QUEUED: waiting, LAUNCHING: 0, RUNNING: billed, CANCELLING: 0 }, billed_chip_hours: billed, cost_usd: cost, unpriced_chip_hours: unpriced,
});

const REPORT = {
  team: "team-a",
  since: "2030-01-01T00:00:00Z",
  as_of: "2030-01-02T00:00:00Z",
  total: sum(2, 1.5, 10, 24.24),
  groups: [
    { team: "team-a", accelerator: "v5p-8", capacity: "spot", ...sum(1, 0, 2, 3.36) },
    { team: "team-a", accelerator: "v6e-8", capacity: "on-demand", ...sum(1, 1.5, 8, 21.6) },
  ],
  jobs: [
    { job_id: "rl-000000000002", name: "spot", team: "team-a", phase: "CANCELLED", created_at: "2030-01-01T01:00:00Z",
      usage: { accelerator: "v5p-8", capacity: "spot", chips: 4, phases: phases(4, { running: 1740, cancelling: 60 }), billed_chip_hours: 2, cost_usd: 3.36 } },
    { job_id: "rl-000000000001", name: "big", team: "team-a", phase: "SUCCEEDED", created_at: "2030-01-01T00:00:00Z",
      usage: { accelerator: "v6e-8", capacity: "on-demand", chips: 8, phases: phases(8, { queued: 600, launching: 75, running: 3600 }), billed_chip_hours: 8, cost_usd: 21.6 } },
  ],
  truncated: false,
};

test("totals keep the service's figures; waiting is queued plus launching", () => {
  const view = usageView(REPORT);
  assert.deepEqual(view.total, { jobs: 2, waitingChipHours: 1.5, billedChipHours: 10, costUsd: 24.24, unpricedChipHours: 0 });
  assert.equal(view.team, "team-a");
  assert.equal(view.truncated, false);
});

test("groups come costliest first, each with its share of the billed chip-hours", () => {
  const view = usageView(REPORT);
  assert.deepEqual(view.groups.map((g) => g.slice), ["v6e-8 on-demand", "v5p-8 spot"]);
  assert.equal(view.groups[0].share, 0.8);
  assert.equal(view.groups[1].share, 0.2);
  assert.equal(view.groups.reduce((acc, g) => acc + g.billedChipHours, 0), view.total.billedChipHours);
});

test("job rows: hours waited and run from the phases, cancelling counted as running", () => {
  const [spot, big] = usageView(REPORT).jobs;
  assert.equal(spot.runningHours, 0.5);
  assert.equal(spot.waitingHours, 0);
  assert.equal(big.waitingHours, 675 / 3600);
  assert.equal(big.runningHours, 1);
  assert.equal(big.slice, "v6e-8 on-demand");
  assert.equal(big.costUsd, 21.6);
});

test("a job without a price keeps a null cost; an empty or missing answer is an empty view", () => {
  const unpriced = structuredClone(REPORT);
  unpriced.jobs[0].usage.cost_usd = null;
  assert.equal(usageView(unpriced).jobs[0].costUsd, null);
  assert.equal(fmtUsd(usageView(unpriced).jobs[0].costUsd), DASH);
  const empty = usageView({ team: "team-b", total: sum(0, 0, 0, 0), groups: [], jobs: [] });
  assert.deepEqual([empty.groups, empty.jobs, empty.total.jobs], [[], [], 0]);
  assert.equal(usageView(undefined).jobs.length, 0);
  assert.equal(usageView({ ...REPORT, total: sum(0, 0, 0, 0) }).groups[0].share, null); // no billed time: no share
});

test("the window's since is that many days back, as a UTC date", () => {
  assert.equal(sinceForDays(30, Date.parse("2030-01-31T12:00:00Z")), "2030-01-01");
  assert.equal(sinceForDays(7, Date.parse("2030-01-08T00:30:00Z")), "2030-01-01");
});

test("chip-hours and dollars with two decimals and thousands separators", () => {
  assert.equal(fmtChipHours(1234.5), "1,234.50");
  assert.equal(fmtUsd(0), "$0.00");
  assert.equal(fmtUsd(3.356), "$3.36");
  assert.equal(fmtChipHours(null), DASH);
});
