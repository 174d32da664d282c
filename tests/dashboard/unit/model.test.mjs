// The view model: the service's JSON (JobPublic, MetricsPublic, SamplesPublic) as the views show it
// (dashboard/src/model.js).
import assert from "node:assert/strict";
import { test } from "node:test";
import { capacityView, healthView, jobView, metricSeries, samplesView } from "../../../dashboard/src/model.js";

const JOB = {
  id: "rl-abcdefghijkl",
  name: "tiny",
  team: "ml",
  submitted_by: null,
  labels: { submitter: "alice" },
  spec: { model: { source: "gs://bucket/models/llama-8b/" }, hardware: { accelerator: "v6e-8" } },
  phase: "RUNNING",
  message: "",
  stage: "train",
  step: 3,
  total_steps: 10,
  eta_s: 70,
  metrics: { reward_mean: 0.25, kl: "0.1", loss: null },
  health: { verdict: "signal", message: "ok", step: 3, signal_fraction: 0.5 },
  created_at: "2025-01-01T00:00:00Z",
  stage_times: {
    convert: { started_at: "t0", finished_at: "t1", duration_s: 12, skipped: true },
    train: { started_at: "t2" },
  },
  artifacts: [{ name: "hf_model", uri: "gs://b/hf", size_bytes: 42 }],
};

test("a job: names, fallbacks and numbers", () => {
  const view = jobView(JOB);
  assert.equal(view.submitter, "alice"); // no submitted_by: the label stands in
  assert.equal(jobView({ ...JOB, submitted_by: "tok-bob" }).submitter, "tok-bob");
  assert.equal(view.model, "llama-8b"); // no model.name: the checkpoint's own name
  assert.equal(jobView({ ...JOB, spec: { ...JOB.spec, model: { name: "m", source: "x" } } }).model, "m");
  assert.equal(view.accelerator, "v6e-8");
  assert.equal(view.totalSteps, 10);
  assert.equal(view.rewardMean, 0.25);
  assert.equal(view.kl, null); // a string is not a number the charts can use
  assert.equal(view.loss, null);
  assert.deepEqual(view.health, { verdict: "signal", message: "ok", step: 3, signalFraction: 0.5, warning: "" });
  assert.deepEqual(view.artifacts, [{ name: "hf_model", uri: "gs://b/hf", sizeBytes: 42 }]);
  assert.equal(view.attempt, 0);
  assert.deepEqual(jobView({ id: "x", phase: "QUEUED" }).artifacts, []);
});

test("a queued job carries where it waits; a job in no queue has null", () => {
  const raw = { ...JOB, phase: "QUEUED", queue: { name: "team/ml", position: 2, reason: "TeamJobLimit", message: "ml runs 2 of its 2 concurrent jobs" } };
  assert.deepEqual(jobView(raw).queue, { name: "team/ml", position: 2, reason: "TeamJobLimit", message: "ml runs 2 of its 2 concurrent jobs" });
  assert.equal(jobView(JOB).queue, null);
  assert.equal(jobView({ ...JOB, queue: null }).queue, null);
});

test("the stage timeline: skipped, running, stopped, failed, pending", () => {
  const states = (raw) => jobView(raw).stages.map((s) => s.state);
  assert.deepEqual(states(JOB), ["skipped", "running", "pending"]);
  assert.deepEqual(states({ ...JOB, stage: "train", finished_at: "t9" }), ["skipped", "stopped", "pending"]);
  assert.deepEqual(states({ ...JOB, failure: { failed_stage: "export" } }), ["skipped", "running", "failed"]);
  const done = { ...JOB, stage_times: { ...JOB.stage_times, convert: { duration_s: 0 } } };
  assert.equal(jobView(done).stages[0].state, "done");
  assert.equal(jobView(done).stages[0].durationS, 0);
});

test("health before the first step is null", () => {
  assert.equal(healthView(null), null);
  assert.equal(healthView({ message: "no verdict" }), null);
});

test("health keeps the warning beside the verdict, and none reads as empty", () => {
  const raw = { verdict: "no-signal", message: "m", step: 4, signal_fraction: 0, warning: "the KL to the reference rose" };
  assert.equal(healthView(raw).warning, "the KL to the reference rose");
  assert.equal(healthView({ ...raw, warning: null }).warning, "");
});

test("metric series: sorted by step, a repeated step keeps the newest, eval points left to JobPublic.eval", () => {
  const series = metricSeries({
    points: [
      { step: 2, kind: "train", values: { reward_mean: 0.5, reward_std: 0.1, kl: 0.01 } },
      { step: 1, kind: "train", values: { reward_mean: 0.2, loss: 3, "sampler_trainer/train/logp_diff_mean": 0.012 } },
      { step: 2, kind: "train", values: { reward_mean: 0.6, reward_std: 0.2 } }, // resumed run: step 2 again
      { step: 2, kind: "eval", values: { accuracy: 0.4 } },
      { step: 1, kind: "eval", values: { eval_accuracy: 0.3 } },
    ],
  });
  assert.deepEqual(series.steps, [1, 2]);
  assert.deepEqual(series.rewardMean, [0.2, 0.6]);
  assert.deepEqual(series.rewardUpper, [0.2, 0.8]); // no std at step 1: the band collapses to the mean
  assert.ok(Math.abs(series.rewardLower[1] - 0.4) < 1e-12);
  assert.deepEqual(series.kl, [null, null]);
  assert.deepEqual(series.loss, [3, null]);
  assert.deepEqual(series.logpDiff, [0.012, null]);
  assert.deepEqual(Object.keys(series).sort(), ["kl", "logpDiff", "loss", "rewardLower", "rewardMean", "rewardUpper", "steps"]);
  const onlyEval = metricSeries({ points: [{ step: 7, kind: "eval", values: { accuracy: 0.4 } }] });
  assert.deepEqual(onlyEval.steps, []); // an eval point is not a train step with no reward
  assert.deepEqual(metricSeries(null).steps, []);
});

test("samples: rewards keep the trainer's order, text stays text", () => {
  const view = samplesView({
    step: 3,
    steps_available: [1, 2, "x", 3],
    samples: {
      groups: 2,
      groups_with_signal: 1,
      completions: 4,
      samples: [{ group: 0, prompt: "<b>q</b>", completion: null, rewards: { b: 1, a: "no" }, total: 1, truncated: 1 }],
    },
  });
  assert.deepEqual(view.stepsAvailable, [1, 2, 3]);
  assert.deepEqual(view.samples[0].rewards, [{ name: "b", value: 1 }, { name: "a", value: null }]);
  assert.equal(view.samples[0].prompt, "<b>q</b>");
  assert.equal(view.samples[0].completion, "");
  assert.equal(view.samples[0].truncated, true);
});

test("capacity: as asked until admitted, then the kind and flavor the pool chose", () => {
  assert.deepEqual(capacityView(null, undefined), { asked: "on-demand", admitted: null, flavor: null, text: "on-demand" });
  assert.equal(capacityView(null, ["spot", "on-demand"]).text, "[spot, on-demand]");
  const placed = capacityView({ capacity: "on-demand", flavor: "tpu-v6e-2x4-on-demand" }, ["spot", "on-demand"]);
  assert.equal(placed.admitted, "on-demand");
  assert.equal(placed.text, "on-demand (admitted to tpu-v6e-2x4-on-demand) · asked [spot, on-demand]");
  assert.equal(capacityView({ capacity: "spot", flavor: null }, "spot").text, "spot");
  assert.equal(jobView({ ...JOB, placement: { capacity: "spot", flavor: "f" } }).capacity.text, "spot (admitted to f)");
});
