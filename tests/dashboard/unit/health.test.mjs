// How the dashboard shows the learning-health verdicts (dashboard/src/widgets.js). That it knows
// every verdict the service has is checked against the service's enum in
// tests/service/domain/health/test_learning_health.py.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HEALTH, healthLook } from "../../../dashboard/src/widgets.js";

test("what the job is doing is calm; what needs acting on is an alert", () => {
  const calm = Object.keys(HEALTH).filter((v) => HEALTH[v].calm).sort();
  assert.deepEqual(calm, ["flat", "improving", "signal"]);
  assert.equal(healthLook("no-signal").text, "no signal");
  assert.equal(healthLook("signal").title, "Learning signal, no improvement shown yet");
});

test("a verdict this dashboard does not know is shown as itself, as an alert", () => {
  assert.deepEqual(healthLook("learning"), { text: "learning", title: "learning", calm: false });
});
