// What the eval panel says in words (pure: no DOM), from model.js's evalView:
//   headline    "34% [29–39] → 51% [45–57], n=300" (+ ", scored by the job's rewards" for a job with its own)
//   difference  "+17 points [11, 23] (60 improved, 9 regressed)"
// Accuracies are whole percents and changes whole percentage points: at the few hundred rows an
// eval split has, a 95% interval is several points wide, so a decimal would claim a precision the
// numbers do not have. `rljob status` (service/cli/output.py) prints the same numbers.
import { DASH } from "./format.js";

const MINUS = "\u2212"; // a real minus sign: a hyphen before a number reads as a dash

/** 0.34 -> 34 (half up, like Python's floor(x + 0.5) in the CLI, so both show the same digits). */
export function wholePercent(fraction) {
  return Math.round(fraction * 100);
}

const signed = (points, plus) => (points < 0 ? `${MINUS}${-points}` : `${plus}${points}`);

/** 0.34 and [0.29, 0.39] -> "34% [29–39]"; the interval is left out when unknown. */
export function pointText(point) {
  if (!point || point.accuracy === null) return DASH;
  const ci = point.ci95 ? ` [${wholePercent(point.ci95[0])}–${wholePercent(point.ci95[1])}]` : "";
  return `${wholePercent(point.accuracy)}%${ci}`;
}

/** Where a point sits in training, as a phrase: "before training", "after training", "at step 20". */
export function pointWhen(point) {
  if (point.label === "before") return "before training";
  if (point.label === "after") return "after training";
  return `at step ${point.step ?? DASH}`;
}

/** The point `before` is compared with: `after`, else the newest step-N evaluation. */
export function latestPoint(view) {
  if (!view) return null;
  if (view.after) return view.after;
  const steps = view.points.filter((p) => p.label !== "before" && p.label !== "after");
  return steps.length ? steps[steps.length - 1] : null;
}

/**
 * The panel's headline; null when there is nothing to show (status "none").
 * Two points: "before → later" (the later one's step named unless it is `after`), then n: one
 * number when both evaluated the same rows count, else both.
 */
export function evalHeadline(view) {
  if (!view || view.status !== "available") return null;
  const from = view.before;
  const to = latestPoint(view);
  if (from && to) {
    const at = to.label === "after" ? "" : ` ${pointWhen(to)}`;
    const n = from.n === to.n ? `n=${from.n ?? DASH}` : `n=${from.n ?? DASH} → ${to.n ?? DASH}`;
    return `${pointText(from)} → ${pointText(to)}${at}, ${n}${scoredByText(to)}`;
  }
  const only = to || from || view.points[view.points.length - 1];
  return `${pointText(only)} ${pointWhen(only)}, n=${only.n ?? DASH}${scoredByText(only)}`;
}

/** MaxText's score needs no words; a job scored by its own reward functions says so (as `rljob status` does). */
export function scoredByText(point) {
  return point && point.scoredBy === "rewards" ? SCORED_BY_REWARDS : "";
}

export const SCORED_BY_REWARDS = ", scored by the job's rewards";

/** "+17 points [11, 23] (60 improved, 9 regressed)"; null when there is no paired difference. */
export function differenceText(diff) {
  if (!diff) return null;
  const ci = diff.ci95 ? ` [${signed(wholePercent(diff.ci95[0]), "")}, ${signed(wholePercent(diff.ci95[1]), "")}]` : "";
  const counts = diff.improved === null || diff.regressed === null ? "" : ` (${diff.improved} improved, ${diff.regressed} regressed)`;
  return `${signed(wholePercent(diff.difference), "+")} points${ci}${counts}`;
}

/** What the difference compares, for its label: "after − before" or "step 20 − before". */
export function differenceOf(diff) {
  if (!diff) return null;
  return `${diff.of === "after" ? "after" : diff.of.replace("-", " ")} ${MINUS} before`;
}

const METHOD_TEXT = {
  "newcombe-paired-wilson": "Newcombe's interval for paired proportions",
  "paired-t": "a paired t interval (each row scored as a fraction of its samples)",
};

/** How the intervals were computed, for the hint under the plot. */
export function methodText(diff) {
  const accuracy = "Bars are 95% Wilson intervals.";
  if (!diff) return accuracy;
  const method = METHOD_TEXT[diff.method] || diff.method || "an unnamed method";
  return `${accuracy} The change is paired over the ${diff.n ?? DASH} rows both evaluations share, with ${method}.`;
}
