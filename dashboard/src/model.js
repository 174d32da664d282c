// Turns the service's JSON (service/domain/models.py: JobPublic, MetricsPublic) into what the
// views show. Kept in one module so a change to the API shape is a change here only.
import { estimateView } from "./estimate.js";
import { primaryPassAt1 } from "./evaljobs.js";
import { hungAttemptsView } from "./hungattempts.js";
import { EVAL_STAGES, STAGES } from "./phases.js";
import { queueView } from "./queue.js";
import { rewardCallsView } from "./rewardcalls.js";
import { storageView } from "./storage.js";

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
    capacity: capacityView(raw.placement, (spec.hardware || {}).capacity),
    message: raw.message || "",
    stage: raw.stage || null,
    step: num(raw.step),
    totalSteps: num(raw.total_steps),
    etaS: num(raw.eta_s),
    rewardMean: num(metrics.reward_mean),
    rewardStd: num(metrics.reward_std),
    kl: num(metrics.kl),
    loss: num(metrics.loss),
    // An eval job's accuracy is its own pass@1 (primary reward function); a training job's, its latest in-loop eval.
    evalAccuracy: evalJobOf(raw) ? primaryPassAt1(evalJobOf(raw)) : num(metrics.eval_accuracy),
    health: healthView(raw.health),
    trainEvals: evalView(raw.train_evals),
    // JobPublic.eval_job is set only on an eval job (a job whose spec has `evaluation`): its checkpoint, suite, scores.
    kind: evalJobOf(raw) || spec.evaluation ? "eval" : "train",
    evalJob: evalJobOf(raw),
    attachedEvals: attachedEvalsOf(raw), // JobPublic.attached_evals: the eval jobs of this job's checkpoints
    goodput: goodputView(raw.goodput),
    estimate: estimateView(raw.estimate, raw.estimate_actuals), // made at submit; beside the actuals once ended
    rewardCalls: rewardCallsView(raw.reward_calls, spec), // the job's own reward functions in their sandbox; null without
    hung: hungAttemptsView(raw), // attempts the trainer's watchdog found hung, and the restarts they cost; null if none
    createdAt: raw.created_at,
    updatedAt: raw.updated_at,
    startedAt: raw.started_at,
    finishedAt: raw.finished_at,
    stages: stageTimeline(raw),
    artifacts: (raw.artifacts || []).map((a) => ({ name: a.name, uri: a.uri, sizeBytes: num(a.size_bytes) })),
    storage: storageView(raw.storage), // the run directory's newest measured size, by part
    failure: raw.failure || null,
    backend: raw.backend || null,
    objectName: raw.object_name || null,
    attempt: raw.attempt || 0,
    runUri: raw.run_uri || null,
    labels,
    spec,
  };
}

/** JobPublic.goodput -> {wallS, parts: [[name, seconds]] in the service's order, productiveFraction}; null before any time. */
export function goodputView(raw) {
  if (!raw || num(raw.wall_s) === null) return null;
  const parts = Object.entries(raw.parts || {}).map(([name, s]) => [name, num(s) ?? 0]);
  return { wallS: raw.wall_s, parts, productiveFraction: num(raw.productive_fraction) };
}

/** JobPublic.health (or a `health` event's data) -> {verdict, message, step, signalFraction, warning}; null before the first step. */
export function healthView(raw) {
  if (!raw || !raw.verdict) return null;
  return {
    verdict: String(raw.verdict),
    message: raw.message || "",
    step: num(raw.step),
    signalFraction: num(raw.signal_fraction),
    warning: raw.warning ? String(raw.warning) : "",
  };
}

const interval = (v) => (Array.isArray(v) && v.length === 2 && num(v[0]) !== null && num(v[1]) !== null ? [v[0], v[1]] : null);

/** One EvalPoint (an evaluation: before, step-N or after); null if it has no label to show it by. */
function evalPoint(raw) {
  if (!raw || typeof raw.label !== "string") return null;
  return {
    label: raw.label,
    step: num(raw.step),
    n: num(raw.n),
    accuracy: num(raw.accuracy),
    ci95: interval(raw.ci95),
    formatAccuracy: num(raw.format_accuracy),
    partialAccuracy: num(raw.partial_accuracy),
    meanReward: num(raw.mean_reward),
    samplesPerRow: num(raw.samples_per_row),
    sampling: raw.sampling ? String(raw.sampling) : null,
    scoredBy: raw.scored_by === "rewards" ? "rewards" : "maxtext", // a service before scored_by scored by MaxText
  };
}

/**
 * JobPublic.train_evals -> {status, reason, points, before, after, difference}. Points keep the service's
 * order (oldest first: before, step-N..., after). "available" with no usable point is shown as
 * "none": the panel then says why instead of drawing an empty plot. Null when the service sent no
 * `eval` at all (one older than issue 19).
 */
export function evalView(raw) {
  if (!raw || typeof raw !== "object") return null;
  const points = (raw.points || []).map(evalPoint).filter(Boolean);
  const d = raw.difference;
  const difference = d && num(d.difference) !== null
    ? { of: String(d.of || ""), difference: d.difference, ci95: interval(d.ci95), n: num(d.n), improved: num(d.improved), regressed: num(d.regressed), method: d.method || null }
    : null;
  return {
    status: raw.status === "available" && points.length ? "available" : "none",
    reason: raw.reason ? String(raw.reason) : "",
    points,
    before: evalPoint(raw.before),
    after: evalPoint(raw.after),
    difference,
  };
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

function evalJobOf(raw) {
  return raw.eval_job || null;
}

function attachedEvalsOf(raw) {
  return Array.isArray(raw.attached_evals) ? raw.attached_evals : [];
}

/** One row per trainer stage, in pipeline order, with a state the timeline can colour. */
function stageTimeline(raw) {
  const times = raw.stage_times || {};
  const failedStage = raw.failure && raw.failure.failed_stage;
  const order = evalJobOf(raw) || (raw.spec && raw.spec.evaluation) ? EVAL_STAGES : STAGES;
  return order.map((stage) => {
    const t = times[stage] || {};
    let state = "pending";
    if (t.finished_at || t.duration_s !== undefined && t.duration_s !== null) state = t.skipped ? "skipped" : "done";
    else if (failedStage === stage) state = "failed";
    else if (t.started_at) state = raw.stage === stage && !raw.finished_at ? "running" : "stopped";
    return { stage, state, startedAt: t.started_at || null, finishedAt: t.finished_at || null, durationS: num(t.duration_s) };
  });
}

/**
 * MetricsPublic -> column arrays for the charts: reward mean/std, KL and loss from the train points.
 * Eval points are left out: evaluations come whole, with their intervals, in JobPublic.train_evals
 * (evalView). Points are sorted by step and a repeated step keeps the newest value (a resumed run
 * can report a step twice).
 */
export function metricSeries(raw) {
  const train = new Map();
  for (const p of (raw && raw.points) || []) {
    if (p.kind !== "eval") train.set(p.step, p.values || {});
  }
  const steps = [...train.keys()].sort((a, b) => a - b);
  const col = (key) => steps.map((s) => num(train.get(s)[key]));
  const mean = col("reward_mean");
  const std = col("reward_std");
  return {
    steps,
    rewardMean: mean,
    rewardUpper: mean.map((m, i) => (m === null || std[i] === null ? m : m + std[i])),
    rewardLower: mean.map((m, i) => (m === null || std[i] === null ? m : m - std[i])),
    kl: col("kl"),
    loss: col("loss"),
    // the rollout engine's and the trainer's log-probabilities of the sampled tokens (trainer/maxtext_entry/logprob_agreement.py)
    logpDiff: col("sampler_trainer/train/logp_diff_mean"),
  };
}

/** hardware.capacity as asked (a kind or an ordered list) and the kind (and flavor) the job was last admitted into. */
export function capacityView(placement, asked) {
  const askedText = Array.isArray(asked) ? `[${asked.join(", ")}]` : asked || "on-demand";
  if (!placement || !placement.capacity) return { asked: askedText, admitted: null, flavor: null, text: askedText };
  const where = placement.flavor ? `${placement.capacity} (admitted to ${placement.flavor})` : placement.capacity;
  const text = Array.isArray(asked) ? `${where} · asked ${askedText}` : where;
  return { asked: askedText, admitted: placement.capacity, flavor: placement.flavor || null, text };
}
