// The job page's reward sandbox panel (dashboard/src/rewardcalls.js), from JobPublic.reward_calls.
import assert from "node:assert/strict";
import { test } from "node:test";
import { jobView } from "../../../dashboard/src/model.js";
import { fmtLatency, networkNote, policyText, rewardCallsView, writesNote } from "../../../dashboard/src/rewardcalls.js";

// As service/domain/records/reward_calls.py RewardCalls serializes: 200 calls, 3 raised, 8 passed their deadline.
const CALLS = { calls: 200, errors: 3, timeouts: 8, latency_p50_s: 0.0125, latency_p95_s: 2.5, network_isolated: true };

test("no reward functions of its own, no panel (the service sends null)", () => {
  assert.equal(rewardCallsView(null, {}), null);
  assert.equal(rewardCallsView({}, {}), null);
  assert.equal(jobView({ id: "rl-x", spec: {}, reward_calls: null }).rewardCalls, null);
});

test("counts, error and timeout rates apart, latencies", () => {
  const view = jobView({ id: "rl-x", spec: {}, reward_calls: CALLS }).rewardCalls;
  assert.equal(view.calls, 200);
  assert.equal(view.errors, 3);
  assert.equal(view.timeouts, 8);
  assert.equal(view.errorRate, 0.015);
  assert.equal(view.timeoutRate, 0.04);
  const rows = Object.fromEntries(view.rows.map((row) => [row.key, row.value]));
  assert.deepEqual(rows, { calls: "200", errors: "3 (1.5%)", timeouts: "8 (4.0%)", p50: "12.5 ms", p95: "2.5 s" });
});

test("no calls yet: no rates; latencies not reported are a dash", () => {
  const view = rewardCallsView({ calls: 0, errors: 0, timeouts: 0, latency_p50_s: null, latency_p95_s: null, network_isolated: null }, {});
  assert.equal(view.errorRate, null);
  assert.equal(view.timeoutRate, null);
  const rows = Object.fromEntries(view.rows.map((row) => [row.key, row.value]));
  assert.deepEqual(rows, { calls: "0", errors: "0", timeouts: "0", p50: "—", p95: "—" });
  assert.equal(fmtLatency(0.85), "850 ms");
});

test("a network the reward workers could reach is a warning; isolated and unreported are not", () => {
  const open = networkNote(rewardCallsView({ ...CALLS, network_isolated: false }, {}));
  assert.equal(open.warn, true);
  assert.match(open.text, /NOT isolated/);
  const closed = networkNote(rewardCallsView(CALLS, {}));
  assert.equal(closed.warn, false);
  assert.match(closed.text, /^No network/);
  const unknown = networkNote(rewardCallsView({ ...CALLS, network_isolated: undefined }, {}));
  assert.equal(unknown.warn, false);
  assert.match(unknown.text, /not reported/);
});

test("what a failed call scores follows grpo.rewards.on_error, with the per-call deadline", () => {
  const zero = rewardCallsView(CALLS, {});
  assert.equal(zero.onError, "zero"); // the spec's default
  assert.match(policyText(zero), /scores its completions 0/);
  const fail = rewardCallsView(CALLS, { grpo: { rewards: { on_error: "fail", timeout_s: 30 } } });
  assert.equal(fail.onError, "fail");
  assert.match(policyText(fail), /stops the train stage/);
  assert.match(policyText(fail), /Deadline per call: 30 s\.$/);
});

test("writes the reward workers could make anywhere are a warning; confined is not; unreported says nothing", () => {
  const open = writesNote(rewardCallsView({ ...CALLS, writes_confined: false }, {}));
  assert.equal(open.warn, true);
  assert.match(open.text, /NOT confined/);
  assert.match(open.text, /RLJOB_K8S_REWARD_CONTAINER/);
  const closed = writesNote(rewardCallsView({ ...CALLS, writes_confined: true }, {}));
  assert.equal(closed.warn, false);
  assert.equal(writesNote(rewardCallsView(CALLS, {})), null);
});
