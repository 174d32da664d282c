// An eval job's page section, from GET /v1/evals/{id} (EvalPublic): what it evaluated (checkpoint, the
// model it loaded, the training job it came from), the suite (name, version, content hash, rows,
// sampling), n and k, each reward function's four scores with their 95% intervals (words and a small
// interval plot), what it cost, and, with a baseline, the paired comparison (or the service's reason
// there is none: not finished yet, or suite versions that must not be compared). The pieces that draw
// a comparison are shared with the eval compare view (evaldiff.js).
import { h, replace } from "./dom.js";
import { svg } from "./evalpanel.js";
import {
  comparisonRows, costPerPointRows, evalDiffHref, evalSummaryView, jobHref, samplingText, usageText,
} from "./evaljobs.js";
import { wholePercent } from "./evaltext.js";
import { DASH, fmtDuration } from "./format.js";
import { intervalLayout } from "./intervalplot.js";
import { describeError, errorBox } from "./widgets.js";

const CAP_HALF_HEIGHT_PX = 5;

/**
 * An interval plot (intervalplot.js) as SVG: per row a label, a capped bar across its 95% interval and a
 * dot at its value; `kind` "difference" marks zero. Each row's <g> carries its label and numbers, for
 * tests and screen readers (its <title> says them in words).
 */
export function intervalPlotSvg(rows, { kind = "score", ariaLabel, testid }) {
  const g = intervalLayout(rows, { kind });
  const { area } = g;
  const ticks = g.ticks.map((t) =>
    svg("g", { class: "x-tick" },
      svg("line", { x1: t.x, x2: t.x, y1: area.top, y2: area.bottom }),
      svg("text", { x: t.x, y: area.bottom + 16, "text-anchor": "middle" }, t.text)));
  const zero = g.zeroX === null ? null : svg("line", { class: "zero", x1: g.zeroX, x2: g.zeroX, y1: area.top, y2: area.bottom });
  const marks = g.marks.map((m) => {
    const words = rows.find((r) => r.label === m.label);
    return svg("g", { class: "interval", "data-label": m.label, "data-value": m.value, "data-low": m.ci95 ? m.ci95[0] : "", "data-high": m.ci95 ? m.ci95[1] : "" },
      svg("title", {}, `${m.label}: ${words && words.text ? words.text : m.value}`),
      svg("text", { class: "row-label", x: area.left - 8, y: m.y + 4, "text-anchor": "end" }, m.label),
      m.ci95
        ? [
            svg("line", { class: "errbar", x1: m.xLow, x2: m.xHigh, y1: m.y, y2: m.y }),
            svg("line", { class: "errbar-cap", x1: m.xLow, x2: m.xLow, y1: m.y - CAP_HALF_HEIGHT_PX, y2: m.y + CAP_HALF_HEIGHT_PX }),
            svg("line", { class: "errbar-cap", x1: m.xHigh, x2: m.xHigh, y1: m.y - CAP_HALF_HEIGHT_PX, y2: m.y + CAP_HALF_HEIGHT_PX }),
          ]
        : null,
      svg("circle", { cx: m.x, cy: m.y, r: 4 }));
  });
  return svg("svg", { class: `interval-plot ${kind}`, width: g.width, height: g.height, viewBox: `0 0 ${g.width} ${g.height}`, role: "img", "aria-label": ariaLabel, "data-testid": testid },
    ticks, zero, marks);
}

const col = (text, cls) => h("th", { scope: "col", class: cls }, text);

/** One reward function's four scores: a table (value [95% CI], method) beside their interval plot. */
function functionBlock(fn, n) {
  const rows = fn.rows.map((r) => ({ label: r.score, value: r.value, ci95: r.ci95, text: r.text }));
  return h("div", { class: "eval-function", "data-function": fn.name },
    h("h3", {}, fn.name, fn.primary ? h("span", { class: "sub-label" }, " (primary: comparisons use it)") : null),
    h("div", { class: "eval-function-body" },
      h("table", { class: "artifacts scores", "data-testid": "scores" },
        h("thead", {}, h("tr", {}, col("Score"), col("Value [95% CI]", "num"), col("Interval"))),
        h("tbody", {}, fn.rows.map((r) => h("tr", { "data-score": r.score },
          h("th", { scope: "row" }, r.name),
          h("td", { class: "num" }, r.text),
          h("td", { class: "sub-label" }, r.method === "wilson" ? "Wilson" : r.method === "bootstrap" ? "bootstrap over rows" : DASH))))),
      intervalPlotSvg(rows, { kind: "score", ariaLabel: `${fn.name}: pass@1, sampled accuracy, pass@k and maj@k with 95% intervals, n=${n ?? DASH}`, testid: "scores-plot" })));
}

/** The comparison of eval a with eval b (EvalComparisonPublic): paired differences, McNemar p, cost per point. */
export function comparisonBlock(comparison, { heading = "Against the baseline" } = {}) {
  const c = comparison.comparison || {};
  const rows = comparisonRows(c);
  const aName = comparison.a ? comparison.a.name : "a";
  const bName = comparison.b ? comparison.b.name : "b";
  const costs = costPerPointRows(comparison.cost_per_point);
  return h("div", { class: "eval-comparison", "data-testid": "comparison" },
    h("h3", {}, heading),
    h("p", { class: "hint" },
      `${aName} (${comparison.a.eval_id}) minus ${bName} (${comparison.b.eval_id}) on ${c.function}, paired over the ${c.n} rows both scored: `,
      `a paired bootstrap 95% interval (${c.resamples} resamples, seed ${c.seed}) and, for the 0/1 scores, the exact McNemar p.`),
    h("div", { class: "eval-function-body" },
      h("table", { class: "artifacts scores", "data-testid": "differences" },
        h("thead", {}, h("tr", {}, col("Score"), col("a", "num"), col("b", "num"), col("a − b [95% CI]", "num"), col("McNemar", "num"), col("Rows only a / only b right", "num"))),
        h("tbody", {}, rows.map((r) => h("tr", { "data-score": r.score },
          h("th", { scope: "row" }, r.name),
          h("td", { class: "num" }, r.a === null ? DASH : `${wholePercent(r.a)}%`),
          h("td", { class: "num" }, r.b === null ? DASH : `${wholePercent(r.b)}%`),
          h("td", { class: "num", "data-testid": "difference" }, r.text),
          h("td", { class: "num", "data-testid": "mcnemar" }, r.p || DASH),
          h("td", { class: "num" }, r.onlyA === null ? DASH : `${r.onlyA} / ${r.onlyB}`))))),
      intervalPlotSvg(rows.map((r) => ({ label: r.score, value: r.difference, ci95: r.ci95, text: r.text })),
        { kind: "difference", ariaLabel: `${aName} minus ${bName}: paired differences with 95% intervals`, testid: "differences-plot" })),
    costs.length
      ? h("ul", { class: "cost-per-point", "data-testid": "cost-per-point" }, costs.map((x) =>
        h("li", { "data-score": x.score }, `Training job `, h("a", { href: jobHref(x.trainingJob) }, x.trainingJob), `: ${x.verdict}`)))
      : null,
    comparison.cost_note ? h("p", { class: "hint", "data-testid": "cost-note" }, `No cost per point: ${comparison.cost_note}.`) : null);
}

/** What the eval evaluated, on which suite version, and what it cost: a definition list. */
function whatPanel(ev, view) {
  const s = view.suite || {};
  const pairs = [
    ["Checkpoint", h("span", { "data-testid": "checkpoint" }, view.checkpointText)],
    ["Model evaluated", h("span", { class: "mono", "data-testid": "model-source" }, view.modelSource || DASH)],
    ["Training job", view.trainingJob ? h("a", { href: jobHref(view.trainingJob), "data-testid": "training-job" }, view.trainingJob) : null],
    ["Checkpoint params", view.checkpoint && view.checkpoint.params ? h("span", { class: "mono" }, view.checkpoint.params) : null],
    ["Suite", h("span", { "data-testid": "suite" }, view.suiteText)],
    ["Suite scope", s.scope ? (s.scope === "builtin" ? "built in" : `team ${s.scope}`) : null],
    ["Rows scored", h("span", { "data-testid": "n" }, view.n === null ? "not reported yet" : `n=${view.n}${s.rows != null && s.rows !== view.n ? ` of ${s.rows}` : ""}`)],
    ["Samples per row", h("span", { "data-testid": "k" }, view.k === null ? DASH : `k=${view.k}`)],
    ["Sampling", samplingText(s.sampling)],
    ["Reward functions", (s.reward_functions || []).join(", ") || DASH],
    ["Generating and scoring", view.generateS === null ? null : fmtDuration(view.generateS)],
    ["Cost", h("span", { "data-testid": "usage" }, usageText(ev.usage, fmtDuration))],
  ];
  return h("dl", { class: "summary" }, pairs.filter(([, v]) => v !== null).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

/** The eval job's section of its job page; `update(job)` re-reads GET /v1/evals/{id} when the job changed. */
export function evalJobPanel(api, jobId) {
  const body = h("div", {}, h("p", { class: "hint" }, "Loading the evaluation…"));
  const reload = h("button", { type: "button", onclick: () => load() }, "Reload");
  const el = h("section", { class: "panel eval-job", "aria-labelledby": "eval-job-h", "data-testid": "eval-job" },
    h("div", { class: "panel-head" }, h("h2", { id: "eval-job-h" }, "Evaluation"), reload), body);
  let seen = null;
  let left = false;

  async function load() {
    reload.disabled = true;
    try {
      const ev = await api.get(`/v1/evals/${encodeURIComponent(jobId)}`);
      if (!left) render(ev);
    } catch (err) {
      if (!left && err.kind !== "unauthorized") replace(body, errorBox(...describeError(err)));
    } finally {
      reload.disabled = false;
    }
  }

  function render(ev) {
    const view = evalSummaryView(ev.eval_job);
    el.dataset.phase = ev.phase;
    const scores = view.reported
      ? view.functions.map((fn) => functionBlock(fn, view.n))
      : h("p", { class: "no-data", "data-testid": "no-scores" }, `No scores yet: the eval job is ${ev.phase}. They appear when its trainer reports.`);
    let baseline = null;
    if (view.baseline) {
      const link = h("a", { href: jobHref(view.baseline), "data-testid": "baseline" }, view.baseline);
      baseline = h("div", { class: "eval-baseline" },
        h("p", {}, "Baseline: ", link, " · ", h("a", { href: evalDiffHref(jobId, view.baseline) }, "open both in the compare view")),
        ev.comparison ? comparisonBlock(ev.comparison) : null,
        ev.comparison_note ? h("p", { class: "alert warn", "data-testid": "comparison-note" }, ev.comparison_note) : null);
    }
    replace(body, whatPanel(ev, view), scores, baseline,
      view.baseline ? null : h("p", { class: "hint" }, h("a", { href: evalDiffHref(jobId, null) }, "Compare with another eval")));
  }

  return {
    el,
    /** @param {ReturnType<import("./model.js").jobView>} job */
    update(job) {
      const key = `${job.phase}|${job.updatedAt}`;
      if (key === seen) return;
      seen = key;
      load();
    },
    destroy() {
      left = true;
    },
  };
}
