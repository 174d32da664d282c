// A training job's attached evaluations (JobSpec.eval), from JobPublic.attached_evals: one eval job per checkpoint
// (base, step-N..., export), each with its scores on the suite's primary reward function and 95%
// intervals, and its paired difference from the base eval with its interval and McNemar p, as the
// service computed them; each links to its eval job. A plot of pass@1 per checkpoint and one of the
// differences from base sit beside the table. Drawn from the job the page already re-reads, so it
// follows the evals as they finish without a request of its own.
import { h } from "./dom.js";
import { attachedRows, evalDiffHref, jobHref } from "./evaljobs.js";
import { intervalPlotSvg } from "./evaljobpanel.js";
import { DASH } from "./format.js";
import { phaseBadge } from "./widgets.js";

const col = (text, cls) => h("th", { scope: "col", class: cls }, text);
const score = (row, name) => (row.scores ? row.scores.find((s) => s.score === name) : null);

/** @param {ReturnType<import("./model.js").jobView>} job  null when the job asked for no attached evaluation */
export function attachedEvalsPanel(job) {
  const attached = job.spec && job.spec.eval;
  if (!attached && !job.attachedEvals.length) return null;
  const rows = attachedRows(job.attachedEvals);
  const suite = attached && attached.suite ? attached.suite.name : null;
  const fn = rows.find((r) => r.function)?.function || null;
  const base = rows.find((r) => r.label === "base" && r.evalId);
  const head = h("h2", { id: "attached-h" }, `Evaluations of this job's checkpoints${suite ? ` on ${suite}` : ""}`);
  if (!rows.length) {
    return h("section", { class: "panel attached-evals", "aria-labelledby": "attached-h", "data-testid": "attached-evals" }, head,
      h("p", { class: "hint" }, "No eval job yet: the base model's is made when the job is stored, one per evaluated checkpoint as the trainer saves it, and the export's when the job succeeds."));
  }
  const pass1 = rows.map((r) => ({ label: r.label, value: score(r, "pass@1")?.value ?? null, ci95: score(r, "pass@1")?.ci95 ?? null, text: score(r, "pass@1")?.text }));
  const diffs = rows.filter((r) => r.vsBase).map((r) => ({ label: r.label, value: r.vsBase.difference, ci95: r.vsBase.ci95, text: r.vsBase.text }));
  return h("section", { class: "panel attached-evals", "aria-labelledby": "attached-h", "data-testid": "attached-evals" },
    head,
    h("p", { class: "hint" }, `Scores on ${fn ? `reward function ${fn} (the suite's primary)` : "the suite's primary reward function"} with 95% intervals; the change is each eval minus the base model's, paired by row, with a bootstrap 95% interval and the exact McNemar p.`),
    h("table", { class: "artifacts scores", "data-testid": "attached-table" },
      h("thead", {}, h("tr", {}, col("Checkpoint"), col("Eval job"), col("Phase"), col("Suite"), col("pass@1", "num"), col("sampled", "num"), col("pass@k", "num"),
        col("maj@k", "num"), col("pass@1 − base [95% CI]", "num"), col("McNemar", "num"))),
      h("tbody", {}, rows.map((r) => h("tr", { "data-label": r.label },
        h("th", { scope: "row" }, r.label),
        h("td", {}, r.evalId ? h("a", { href: jobHref(r.evalId), class: "mono" }, r.evalId) : h("span", { class: "sub-label" }, r.note || "not submitted yet")),
        h("td", {}, r.phase ? phaseBadge(r.phase) : DASH),
        h("td", {}, r.suiteVersion === null ? DASH : `v${r.suiteVersion}`),
        ["pass@1", "sampled", "pass@k", "maj@k"].map((name) => h("td", { class: "num", "data-score": name }, score(r, name)?.text ?? DASH)),
        h("td", { class: "num", "data-testid": "vs-base" }, r.vsBase ? [r.vsBase.text, " ", base ? h("a", { href: evalDiffHref(r.evalId, base.evalId), class: "sub-label" }, "compare") : null]
          : r.label === "base" ? "(the base)" : r.note || DASH),
        h("td", { class: "num", "data-testid": "mcnemar" }, r.vsBase?.p || DASH))))),
    h("div", { class: "attached-plots" },
      intervalPlotSvg(pass1, { kind: "score", ariaLabel: "pass@1 of each evaluated checkpoint with 95% intervals", testid: "attached-plot" }),
      diffs.length ? intervalPlotSvg(diffs, { kind: "difference", ariaLabel: "pass@1 minus the base model's, with 95% intervals", testid: "attached-diff-plot" }) : null));
}
