// Turns the service's JSON (service/domain/models.py: JobPublic, MetricsPublic) into what the
// views show. Kept in one module so a change to the API shape is a change here only.
import { STAGES } from "./phases.js";
import { queueView } from "./queue.js";

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

/** JobPublic -> a flat view model. */
export function jobView(raw) {
  const spec = raw.spec || {};
  const metrics = raw.metrics || {};
  const labels = raw.labels || {};
  return {
    id: raw.id,
    name: raw.name,
    team: raw.team,
    // submitted_by is the submitting API token's name; jobs stored before the service recorded it
    // have null there, so a "submitter" label still stands in for them.
    submitter: raw.submitted_by || raw.submitter || labels.submitter || null,
    // model.name is optional (MaxText settings come from the checkpoint's config.json): fall back to
    // the checkpoint's own name, the last part of its location.
    model: (spec.model && (spec.model.name || String(spec.model.source || "").split("/").filter(Boolean).pop())) || null,
    modelSource: (spec.model && spec.model.source) || null,
    accelerator: (spec.hardware && spec.hardware.accelerator) || null,
    phase: raw.phase,
    queue: queueView(raw.queue), // while QUEUED behind a backend's queue: where, why, the place in line
    message: raw.message || "",
    stage: raw.stage || null,
    step: num(raw.step),
    totalSteps: num(raw.total_steps),
    etaS: num(raw.eta_s),
    rewardMean: num(metrics.reward_mean),
    rewardStd: num(metrics.reward_std),
    kl: num(metrics.kl),
    loss: num(metrics.loss),
    evalAccuracy: num(metrics.eval_accuracy),
    health: healthView(raw.health),
    createdAt: raw.created_at,
    updatedAt: raw.updated_at,
    startedAt: raw.started_at,
    finishedAt: raw.finished_at,
    stages: stageTimeline(raw),
    artifacts: (raw.artifacts || []).map((a) => ({ name: a.name, uri: a.uri, sizeBytes: num(a.size_bytes) })),
    failure: raw.failure || null,
    backend: raw.backend || null,
    objectName: raw.object_name || null,
    attempt: raw.attempt || 0,
    runUri: raw.run_uri || null,
    labels,
    spec,
  };
}

/** JobPublic.health (or a `health` event's data) -> {verdict, message, step, signalFraction}; null before the first step. */
export function healthView(raw) {
  if (!raw || !raw.verdict) return null;
  return { verdict: String(raw.verdict), message: raw.message || "", step: num(raw.step), signalFraction: num(raw.signal_fraction) };
}

/** SamplesPublic -> what the samples panel shows; reward scores keep the trainer's order. */
export function samplesView(raw) {
  const s = (raw && raw.samples) || {};
  return {
    step: num(raw.step),
    stepsAvailable: (raw.steps_available || []).filter((n) => Number.isInteger(n)),
    groups: num(s.groups),
    groupsWithSignal: num(s.groups_with_signal),
    completions: num(s.completions),
    samples: (s.samples || []).map((x) => ({
      group: num(x.group),
      prompt: String(x.prompt ?? ""),
      completion: String(x.completion ?? ""),
      rewards: Object.entries(x.rewards || {}).map(([name, value]) => ({ name, value: num(value) })),
      total: num(x.total),
      truncated: Boolean(x.truncated),
    })),
  };
}

/** One row per trainer stage, in pipeline order, with a state the timeline can colour. */
function stageTimeline(raw) {
  const times = raw.stage_times || {};
  const failedStage = raw.failure && raw.failure.failed_stage;
  return STAGES.map((stage) => {
    const t = times[stage] || {};
    let state = "pending";
    if (t.finished_at || t.duration_s !== undefined && t.duration_s !== null) state = t.skipped ? "skipped" : "done";
    else if (failedStage === stage) state = "failed";
    else if (t.started_at) state = raw.stage === stage && !raw.finished_at ? "running" : "stopped";
    return { stage, state, startedAt: t.started_at || null, finishedAt: t.finished_at || null, durationS: num(t.duration_s) };
  });
}

/**
 * MetricsPublic -> column arrays for the charts. Train points give reward mean/std, KL and loss;
 * eval points give accuracy. Points are sorted by step and a repeated step keeps the newest value
 * (a resumed run can report a step twice).
 */
export function metricSeries(raw) {
  const train = new Map();
  const evals = new Map();
  for (const p of (raw && raw.points) || []) {
    (p.kind === "eval" ? evals : train).set(p.step, p.values || {});
  }
  const steps = [...train.keys()].sort((a, b) => a - b);
  const col = (key) => steps.map((s) => num(train.get(s)[key]));
  const mean = col("reward_mean");
  const std = col("reward_std");
  const evalSteps = [...evals.keys()].sort((a, b) => a - b);
  return {
    steps,
    rewardMean: mean,
    rewardUpper: mean.map((m, i) => (m === null || std[i] === null ? m : m + std[i])),
    rewardLower: mean.map((m, i) => (m === null || std[i] === null ? m : m - std[i])),
    kl: col("kl"),
    loss: col("loss"),
    evalSteps,
    evalAccuracy: evalSteps.map((s) => num(evals.get(s).accuracy ?? evals.get(s).eval_accuracy)),
  };
}
