// The job page's hung attempts (dashboard/src/hungattempts.js), from JobPublic.hangs and .hung_restarts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { hungAttemptsView, restartText } from "../../../dashboard/src/hungattempts.js";
import { jobView } from "../../../dashboard/src/model.js";

// As service/domain/records/run_report.py HangReport serializes, newest last.
const HANGS = [
  { attempt: 1, time: "2026-03-01T12:00:00Z", stage: "train", step: 12, idle_s: 600.4, limit_s: 540, stacks: "/runs/rl-x/logs/train.1.log" },
  { attempt: 2, time: "2026-03-01T12:30:00Z", stage: null, step: null, idle_s: 900, limit_s: 900, stacks: "/runs/rl-x/logs/setup.2.log" },
];

test("no hung attempt, no panel", () => {
  assert.equal(jobView({ id: "rl-x", spec: {} }).hung, null);
  assert.equal(jobView({ id: "rl-x", spec: {}, hangs: [], hung_restarts: 0 }).hung, null);
});

test("each hung attempt: where, how long without progress, its limit, where its stacks are", () => {
  const view = jobView({ id: "rl-x", spec: {}, hangs: HANGS, hung_restarts: 2, message: "running" }).hung;
  assert.equal(view.attempts.length, 2);
  const [first, second] = view.attempts;
  assert.equal(first.attempt, 1);
  assert.equal(first.where, "train stage after step 12");
  assert.equal(first.idleS, 600.4);
  assert.equal(first.limitS, 540);
  assert.equal(first.stacks, "/runs/rl-x/logs/train.1.log");
  assert.equal(second.where, "before its first stage");
  assert.equal(second.stacks, "/runs/rl-x/logs/setup.2.log");
  assert.equal(view.restarts, 2);
  assert.equal(view.restartText, "restarted 2 times from its last checkpoint");
});

test("'hung restart n of N' while the job's message carries the service's limit", () => {
  const message = "attempt 1 hung in the train stage after train step 12: ...; restarting from its last checkpoint (hung restart 1 of 2)";
  const view = hungAttemptsView({ hangs: HANGS.slice(0, 1), hung_restarts: 1, message });
  assert.equal(view.restartText, "hung restart 1 of 2");
  assert.equal(restartText(1, "running", null), "restarted once from its last checkpoint");
  assert.equal(restartText(0, "", null), "not restarted (yet)");
  assert.match(restartText(2, "attempt 3 hung ...; giving up", "HUNG"), /^restarted 2 time\(s\), then given up/);
});
