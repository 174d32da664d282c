// The phase facts the dashboard learns from GET /v1/phases (dashboard/src/phases.js).
import assert from "node:assert/strict";
import { test } from "node:test";
import { isTerminal, loadPhaseFacts, phaseFacts, phases } from "../../../dashboard/src/phases.js";

const ANSWER = {
  phases: ["QUEUED", "LAUNCHING", "RUNNING", "CANCELLING", "SUCCEEDED", "FAILED", "CANCELLED"],
  terminal: ["SUCCEEDED", "FAILED", "CANCELLED"],
  cancellable: ["QUEUED", "LAUNCHING", "RUNNING"],
};

test("terminal and cancellable come from the answer, in any case", () => {
  const facts = phaseFacts(ANSWER);
  assert.deepEqual(facts.phases, ANSWER.phases);
  assert.deepEqual(ANSWER.phases.filter(facts.isTerminal), ANSWER.terminal);
  assert.deepEqual(ANSWER.phases.filter(facts.isCancellable), ANSWER.cancellable);
  assert.equal(facts.isTerminal("failed"), true);
  assert.equal(facts.isTerminal(null), false);
  // Whatever the service says wins: no copy of its own decides.
  assert.equal(phaseFacts({ ...ANSWER, terminal: ["FAILED"] }).isTerminal("SUCCEEDED"), false);
});

test("an answer of another shape is refused, naming what is wrong", () => {
  assert.throws(() => phaseFacts({ ...ANSWER, terminal: "SUCCEEDED" }), /"terminal" is not a list/);
  assert.throws(() => phaseFacts({ ...ANSWER, cancellable: ["PAUSED"] }), /PAUSED is not one of its phases/);
  assert.throws(() => phaseFacts(null), /"phases" is not a list/);
});

test("loaded once, shared by concurrent callers, retried after a failure", async () => {
  assert.throws(() => phases(), /before loadPhaseFacts/);
  let calls = 0;
  const failing = { get: async () => { calls += 1; throw Object.assign(new Error("down"), { kind: "unreachable" }); } };
  await assert.rejects(loadPhaseFacts(failing), /down/);
  const api = { get: async (path) => { calls += 1; assert.equal(path, "/v1/phases"); return ANSWER; } };
  await Promise.all([loadPhaseFacts(api), loadPhaseFacts(api)]);
  await loadPhaseFacts(api);
  assert.equal(calls, 2); // one failure, then one request for three callers
  assert.deepEqual(phases(), ANSWER.phases);
  assert.equal(isTerminal("CANCELLED"), true);
});
