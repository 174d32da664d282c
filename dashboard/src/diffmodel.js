// What the run-diff view shows (pure: no DOM, so node tests can check it), from GET /v1/jobs/diff
// (service/domain/run_diff.py's JobDiff) and each job's metrics and evaluations. The differences and
// outcomes are the service's: this module only lays them out, it never compares values itself.
// The curves are the two jobs' own series put on one step axis.
import { differenceText, pointText } from "./evaltext.js";
import { DASH, fmtDuration, fmtNumber } from "./format.js";

/** "#/diff/A/B" path ("/diff/A/B") -> {a, b}; null for any other path. */
export function diffRoute(path) {
  const match = /^\/diff\/([^/]+)\/([^/]+)$/.exec(path);
  return match ? { a: decodeURIComponent(match[1]), b: decodeURIComponent(match[2]) } : null;
}

export function diffHref(a, b) {
  return `#/diff/${encodeURIComponent(a)}/${encodeURIComponent(b)}`;
}

/** A spec or record value as the table shows it; a key one job lacks reads "(absent)", as in `rljob diff`. */
export function valueText(value) {
  if (value === null || value === undefined) return "(absent)";
  return typeof value === "string" ? value : JSON.stringify(value);
}

/**
 * JobDiff -> one row per difference, spec keys first, then each repro-record section in the
 * service's order: {section, key, a, b} with a and b as text.
 */
export function differenceRows(diff) {
  const rows = (diff.spec || []).map((d) => ({ section: "spec", key: d.key, a: valueText(d.a), b: valueText(d.b) }));
  for (const [section, items] of Object.entries(diff.record || {})) {
    for (const d of items) rows.push({ section, key: d.key, a: valueText(d.a), b: valueText(d.b) });
  }
  return rows;
}

/** How a job is named in the view's legends and column heads: "name (id)". */
export function jobLabel(outcome) {
  return outcome.name && outcome.name !== outcome.job_id ? `${outcome.name} (${outcome.job_id})` : outcome.job_id;
}

const money = (v) => (v === null || v === undefined ? DASH : `$${v.toFixed(2)}`);
const steps = (o) => (o.steps === null ? DASH : o.total_steps ? `${o.steps} / ${o.total_steps}` : String(o.steps));
const bestReward = (o) => (o.best_reward === null ? DASH : `${fmtNumber(o.best_reward)} at step ${o.best_reward_step ?? DASH}`);

// The rows of `rljob diff`'s outcome table (service/cli/run_compare.py's OUTCOME_ROWS), with the paired
// eval change the API also gives; the intervals are the service's, printed as the job page prints them.
const OUTCOME_ROWS = [
  ["Phase", (o) => o.phase],
  ["Final reward", (o) => fmtNumber(o.final_reward)],
  ["Best reward", bestReward],
  ["Eval before [95% CI]", (o) => pointText(o.eval_before)],
  ["Eval after [95% CI]", (o) => pointText(o.eval_after)],
  ["Eval change [95% CI]", (o) => differenceText(o.eval_difference) || DASH],
  ["Steps", steps],
  ["Wall time", (o) => fmtDuration(o.wall_s)],
  ["Chip-hours", (o) => fmtNumber(o.chip_hours)],
  ["Cost (list price)", (o) => money(o.cost_usd)],
];

/** JobDiff.outcomes -> [{label, values: [a's text, b's text]}]. */
export function outcomeRows(outcomes) {
  return OUTCOME_ROWS.map(([label, text]) => ({ label, values: outcomes.map((o) => text(o)) }));
}

/**
 * Several jobs' step series on one x axis (uPlot draws every series against one shared x array).
 * @param {{id: string, label: string, steps: number[], values: (number|null)[]}[]} runs
 * @returns {{steps: number[], series: {index, id, label, values: (number|null)[], points: number}[],
 *   absent: {id, label}[]}}  values are null at the steps a job did not report; a job with no
 *   point at all is left out of `series` and named in `absent`, so the chart can say so. `index`
 *   is the job's place in `runs`, so a job keeps its colour on every chart whatever the other lacks.
 */
export function overlaySteps(runs) {
  const drawn = runs.map((run, index) => ({ run, index, known: new Map(run.steps.map((s, i) => [s, run.values[i]]).filter(([, v]) => v !== null)) }));
  const present = drawn.filter((d) => d.known.size > 0);
  const steps = [...new Set(present.flatMap((d) => [...d.known.keys()]))].sort((x, y) => x - y);
  return {
    steps,
    series: present.map(({ run, index, known }) => ({
      index,
      id: run.id,
      label: run.label,
      values: steps.map((s) => (known.has(s) ? known.get(s) : null)),
      points: known.size,
    })),
    absent: drawn.filter((d) => d.known.size === 0).map(({ run }) => ({ id: run.id, label: run.label })),
  };
}

/**
 * Several jobs' evaluations as one list of points for evalplot.js, each tagged with its series
 * (the job's place in `runs`, as overlaySteps's `index`) and job label.
 * @param {{id: string, label: string, trainEvals: ReturnType<import("./model.js").evalView>}[]} runs
 */
export function overlayEvals(runs) {
  const points = [];
  const series = [];
  const absent = [];
  runs.forEach((run, index) => {
    const ev = run.trainEvals;
    if (!ev || ev.status !== "available") {
      absent.push({ id: run.id, label: run.label, reason: ev ? ev.reason || "no evaluation has finished yet" : "no train_evals field" });
      return;
    }
    series.push({ index, id: run.id, label: run.label, points: ev.points.length });
    for (const p of ev.points) points.push({ ...p, series: index, job: run.label });
  });
  return { points, series, absent };
}
