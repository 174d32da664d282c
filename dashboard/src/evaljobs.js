// What the dashboard shows of eval jobs (pure: no DOM, so node tests can check it), from the service's
// shapes (service/domain/eval_models.py): an eval job's summary (JobPublic.eval_job, EvalPublic), a
// comparison of two evals (EvalComparisonPublic) and a training job's attached evals (JobPublic.attached_evals,
// attached_eval_models.py). Every number is the service's: this module only puts it in words, as
// `rljob` prints it (service/cli/output.py: whole percents, signed points, McNemar p to 2 significant
// digits), never computes an interval or a difference itself.
import { differenceText, wholePercent } from "./evaltext.js";
import { DASH } from "./format.js";

export const SCORES = ["pass@1", "sampled", "pass@k", "maj@k"];
export const SCORE_NAMES = {
  "pass@1": "pass@1 (greedy)",
  sampled: "sampled accuracy",
  "pass@k": "pass@k",
  "maj@k": "maj@k",
};

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
const interval = (v) => (Array.isArray(v) && v.length === 2 && num(v[0]) !== null && num(v[1]) !== null ? [v[0], v[1]] : null);

/** "#/evals/diff/A/B" path -> {a, b}; "/evals/diff/A" or "/evals/diff" (the rest to pick) -> nulls; null for any other path. */
export function evalDiffRoute(path) {
  const match = /^\/evals\/diff(?:\/([^/]+)(?:\/([^/]+))?)?$/.exec(path);
  if (!match) return null;
  const id = (s) => (s === undefined ? null : decodeURIComponent(s));
  return { a: id(match[1]), b: id(match[2]) };
}

export function evalDiffHref(a, b) {
  if (!a) return "#/evals/diff";
  return b ? `#/evals/diff/${encodeURIComponent(a)}/${encodeURIComponent(b)}` : `#/evals/diff/${encodeURIComponent(a)}`;
}

export const jobHref = (id) => `#/jobs/${encodeURIComponent(id)}`;

/** An Estimate ({value, ci95}) -> "70% [40–89]"; a dash when unknown. */
export function estimateText(estimate) {
  if (!estimate || num(estimate.value) === null) return DASH;
  const ci = interval(estimate.ci95);
  return `${wholePercent(estimate.value)}%${ci ? ` [${wholePercent(ci[0])}–${wholePercent(ci[1])}]` : ""}`;
}

/** A ScoreDifference -> "+40 points [10, 70]" (evaltext.js's words for a paired change); a dash when unknown. */
export function scoreDifferenceText(d) {
  if (!d || num(d.difference) === null) return DASH;
  return differenceText({ difference: d.difference, ci95: interval(d.ci95), improved: null, regressed: null });
}

/**
 * McNemar's p as Python's format(p, ".2g") writes it (the CLI's `p=0.13`): 2 significant digits, exact
 * ties to even (0.125 -> "0.12", as Python rounds the double's exact value), exponent form below 1e-4.
 */
export function pValueText(p) {
  if (num(p) === null) return DASH;
  if (p === 0) return "0";
  // The double's exact decimal digits (100 is enough to see a tie: a p-value tie ends in 5 and zeros).
  const [mantissa, exp] = p.toExponential(100).split("e");
  const digits = mantissa.replace(".", "").replace("-", "");
  let e = Number(exp);
  let kept = Number(digits.slice(0, 2));
  const rest = digits.slice(2);
  const half = rest[0] === "5" && /^0*$/.test(rest.slice(1));
  if (rest[0] > "5" || (rest[0] === "5" && !half) || (half && kept % 2 === 1)) kept += 1;
  if (kept === 100) {
    kept = 10;
    e += 1;
  }
  const sig = `${Math.floor(kept / 10)}${kept % 10 ? `.${kept % 10}` : ""}`;
  if (e < -4 || e >= 2) return `${sig}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  const fixed = ((kept / 10) * 10 ** e).toFixed(Math.max(0, 1 - e));
  return fixed.includes(".") ? fixed.replace(/\.?0+$/, "") : fixed;
}

/** "p=0.13", or null when the score has no McNemar test (sampled accuracy is not 0/1). */
export function mcnemarText(d) {
  return d && num(d.mcnemar_p) !== null ? `p=${pValueText(d.mcnemar_p)}` : null;
}

/** EvalSuitePublic -> "arith v1 · hash 0123456789abcdef" ("not versioned yet" before the eval has reported). */
export function suiteText(suite) {
  if (!suite) return DASH;
  const version = num(suite.version) !== null ? `v${suite.version}` : "not versioned yet";
  return `${suite.name} ${version}${suite.content_hash ? ` · hash ${suite.content_hash}` : ""}`;
}

/** EvalSampling -> "k=4 samples at temperature 0.9, top-k 50, up to 256 new tokens, seed 20261204". */
export function samplingText(sampling) {
  if (!sampling) return DASH;
  return `${sampling.samples} samples per row at temperature ${sampling.temperature}, top-k ${sampling.top_k}, up to ${sampling.max_new_tokens} new tokens, seed ${sampling.seed}`;
}

const LABEL_TEXT = { base: "base model", export: "export", best: "best checkpoint", last: "last checkpoint", location: "checkpoint location" };

/** EvalCheckpoint -> what it is in words: "export of rl-…", "step-20 of rl-…", "checkpoint location". */
export function checkpointText(checkpoint) {
  if (!checkpoint) return DASH;
  const what = LABEL_TEXT[checkpoint.label] || checkpoint.label;
  return checkpoint.job_id ? `${what} of ${checkpoint.job_id}` : what;
}

/** The reward functions in the order to show them: the primary one first, then the rest by name. */
export function functionOrder(scores, primary) {
  const names = Object.keys(scores || {}).sort();
  return primary && names.includes(primary) ? [primary, ...names.filter((n) => n !== primary)] : names;
}

/** One function's FunctionScores -> [{score, name, value, ci95, method, text}] in SCORES order. */
export function scoreRows(functionScores) {
  return SCORES.map((score) => {
    const e = (functionScores || {})[score] || null;
    return { score, name: SCORE_NAMES[score], value: e ? num(e.value) : null, ci95: e ? interval(e.ci95) : null, method: e ? e.method : null, text: estimateText(e) };
  });
}

/** EvalSummaryPublic (JobPublic.eval_job) -> what the eval job's page shows. */
export function evalSummaryView(raw) {
  if (!raw || typeof raw !== "object") return null;
  const scores = raw.scores || {};
  return {
    checkpoint: raw.checkpoint || null,
    checkpointText: checkpointText(raw.checkpoint),
    trainingJob: (raw.checkpoint && raw.checkpoint.job_id) || null,
    modelSource: raw.model_source || null,
    suite: raw.suite || null,
    suiteText: suiteText(raw.suite),
    baseline: raw.baseline || null,
    n: num(raw.n),
    k: num(raw.k),
    primary: raw.primary || null,
    reported: Object.keys(scores).length > 0,
    functions: functionOrder(scores, raw.primary).map((name) => ({ name, primary: name === raw.primary, rows: scoreRows(scores[name]) })),
    generateS: num(raw.generate_s),
  };
}

/** The primary reward function's pass@1 of an eval job's summary (the board's accuracy column); null before it reported. */
export function primaryPassAt1(raw) {
  const f = raw && raw.scores && raw.primary ? raw.scores[raw.primary] : null;
  return f && f["pass@1"] ? num(f["pass@1"].value) : null;
}

/** A Comparison's scores -> [{score, name, a, b, difference, ci95, text, p, onlyA, onlyB}] in SCORES order. */
export function comparisonRows(comparison) {
  const by = new Map(((comparison && comparison.scores) || []).map((s) => [s.score, s]));
  return SCORES.filter((score) => by.has(score)).map((score) => {
    const d = by.get(score);
    return {
      score,
      name: SCORE_NAMES[score],
      a: num(d.a),
      b: num(d.b),
      difference: num(d.difference),
      ci95: interval(d.ci95),
      text: scoreDifferenceText(d),
      p: mcnemarText(d),
      onlyA: num(d.a_only),
      onlyB: num(d.b_only),
    };
  });
}

/** CostPerPoint -> {score, verdict} (the service's sentence) with the training job it divides. */
export function costPerPointRows(list) {
  return (list || []).map((c) => ({ score: c.score, verdict: String(c.verdict || ""), trainingJob: c.training_job_id || null }));
}

/** EvalSide -> "0.00 chip-hours · $0.00" (cost at list price; a dash without a price). */
export function sideCostText(side) {
  if (!side) return DASH;
  const hours = num(side.chip_hours);
  const cost = num(side.cost_usd);
  return `${hours === null ? DASH : hours.toFixed(2)} chip-hours · ${cost === null ? "no price" : `$${cost.toFixed(2)}`}`;
}

/** JobUsage -> "running 1m 5s on cpu · 0.00 chip-hours billed · $0.00 at list price". */
export function usageText(usage, fmtDuration) {
  if (!usage) return DASH;
  const phases = usage.phases || {};
  const running = ["RUNNING", "CANCELLING"].reduce((s, p) => s + (num(phases[p] && phases[p].seconds) || 0), 0);
  const cost = num(usage.cost_usd);
  return `running ${fmtDuration(running)} on ${usage.accelerator} · ${(num(usage.billed_chip_hours) || 0).toFixed(2)} chip-hours billed · ${cost === null ? "no price for this hardware" : `$${cost.toFixed(2)} at list price`}`;
}

/** A label's place: base first, then steps ascending, then the export (the service's order; kept when unknown). */
function labelOrder(label) {
  if (label === "base") return [0, 0];
  const step = /^step-(\d+)$/.exec(label || "");
  return step ? [1, Number(step[1])] : [2, 0];
}

/** JobPublic.attached_evals -> one row per attached eval: its scores on the suite's primary function and its change from base. */
export function attachedRows(evals) {
  return (evals || [])
    .map((e) => {
      const vsBase = e.vs_base ? comparisonRows(e.vs_base) : [];
      const pass1 = vsBase.find((r) => r.score === "pass@1") || null;
      return {
        label: String(e.label),
        step: num(e.step),
        evalId: e.eval_id || null,
        phase: e.phase || null,
        suiteVersion: num(e.suite_version),
        function: e.function || null,
        scores: e.scores ? scoreRows(e.scores) : null,
        vsBase: pass1,
        note: e.note ? String(e.note) : null,
      };
    })
    .sort((x, y) => {
      const [a, b] = [labelOrder(x.label), labelOrder(y.label)];
      return a[0] - b[0] || a[1] - b[1];
    });
}
