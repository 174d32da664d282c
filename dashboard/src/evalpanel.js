// The job page's eval panel, from JobPublic.train_evals (model.js's evalView): the headline (before → after
// with 95% intervals and n), the paired change, and each evaluation's accuracy by step with its
// interval drawn as an error bar. The plot is a small SVG, not uPlot: it has a handful of points,
// and error bars are plain elements that tests and screen readers can find. It is drawn at the
// panel's own pixel width (redrawn when that changes), so its text is page-sized text at any width
// instead of a scaled picture. When the job has no evaluation the panel says why (the service's
// reason), not "No data yet".
import { h, replace } from "./dom.js";
import { DASH, fmtNumber, fmtPercent } from "./format.js";
import { evalPlotLayout, PLOT_SIZE } from "./evalplot.js";
import { differenceOf, differenceText, evalHeadline, methodText, pointText, pointWhen } from "./evaltext.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const CAP_HALF_WIDTH_PX = 5;
const MIN_PLOT_WIDTH_PX = 280;
const NO_EVAL_FIELD = "This service does not report evaluations (its jobs have no train_evals field).";

/** An SVG element; attributes only (the page's CSP forbids inline style), text as text nodes. */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) el.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return el;
}

export function evalPanel() {
  const headline = h("p", { class: "eval-headline", "data-testid": "eval-headline" });
  const change = h("p", { class: "eval-change", "data-testid": "eval-difference" });
  const body = h("div", { class: "eval-body" });
  const el = h(
    "section",
    { class: "chart panel eval-panel", "aria-labelledby": "eval-h", "data-status": "" },
    h("h2", { id: "eval-h" }, "Eval accuracy"),
    headline,
    change,
    body,
  );

  let shown; // the view last drawn, as JSON
  let drawn = null; // {view, title, width, slot} of the plot on the page
  const redraw = () => {
    if (!drawn) return;
    const width = plotWidth(drawn.slot);
    if (width !== drawn.width) {
      drawn.width = width;
      replace(drawn.slot, plot(drawn.view, drawn.title, width));
    }
  };
  const observer = new ResizeObserver(redraw);
  observer.observe(el);
  return {
    el,
    /** @param {ReturnType<import("./model.js").evalView>} view */
    update(view) {
      // The job page re-renders every few seconds (running times); redrawing an unchanged panel
      // would close the reader's open "Each evaluation" table.
      const key = JSON.stringify(view);
      if (key === shown) return;
      shown = key;
      el.dataset.status = view ? view.status : "unreported";
      if (!view || view.status !== "available") {
        headline.textContent = "";
        change.textContent = "";
        const reason = view ? view.reason || "No evaluation has run yet." : NO_EVAL_FIELD;
        drawn = null;
        replace(body, h("p", { class: "no-data", "data-testid": "eval-reason" }, reason));
        return;
      }
      const title = evalHeadline(view);
      headline.textContent = title;
      const diff = differenceText(view.difference);
      replace(change, diff ? [h("span", { class: "sub-label" }, `Paired change (${differenceOf(view.difference)}): `), h("strong", {}, diff)] : null);
      const slot = h("div", { class: "eval-plot-slot" });
      replace(body, slot, h("p", { class: "hint" }, methodText(view.difference)), pointsTable(view));
      drawn = { view, title, width: null, slot };
      redraw();
    },
    destroy() {
      observer.disconnect();
    },
  };
}

export function plotWidth(slot) {
  return Math.max(MIN_PLOT_WIDTH_PX, Math.floor(slot.clientWidth || PLOT_SIZE.width));
}

function plot(view, title, width) {
  return evalPlotSvg(view.points, `Eval accuracy by step: ${title}`, width);
}

/**
 * The accuracy-by-step SVG. With `overlay`, the points are several runs' (evalplot.js's `series`
 * and `job` on each): each run's points and line get its .series-N colour and its label in their
 * tooltip, and the before/after captions are left out (two runs' would overprint each other).
 */
export function evalPlotSvg(points, ariaLabel, width, { overlay = false } = {}) {
  const g = evalPlotLayout(points, { ...PLOT_SIZE, width });
  const { area } = g;
  const grid = g.yTicks.map((t) =>
    svg("g", { class: "y-tick" },
      svg("line", { x1: area.left, x2: area.right, y1: t.y, y2: t.y }),
      svg("text", { x: area.left - 6, y: t.y + 4, "text-anchor": "end" }, t.text)));
  const xAxis = g.xTicks.map((t) => svg("text", { class: "x-tick", x: t.x, y: area.bottom + 16, "text-anchor": "middle" }, String(t.step)));
  const runs = new Map();
  for (const m of g.marks) runs.set(m.series, [...(runs.get(m.series) || []), m]);
  const lines = [...runs].filter(([, marks]) => marks.length > 1).map(([series, marks]) =>
    svg("path", {
      class: overlay ? `eval-line series-${series}` : "eval-line",
      d: marks.map((m, i) => `${i ? "L" : "M"}${m.x.toFixed(1)},${m.y.toFixed(1)}`).join(" "),
    }));
  const marks = g.marks.map((m) => {
    const named = !overlay && (m.label === "before" || m.label === "after");
    const attrs = { class: overlay ? `eval-point series-${m.series}` : "eval-point", "data-label": m.label, "data-step": m.step };
    if (overlay) attrs["data-job"] = m.job;
    return svg("g", attrs,
      svg("title", {}, `${overlay ? `${m.job}, ` : ""}${m.label}: ${pointText(m)} (step ${m.step})`),
      m.ci95
        ? [
            svg("line", { class: "errbar", x1: m.x, x2: m.x, y1: m.yLow, y2: m.yHigh }),
            svg("line", { class: "errbar-cap", x1: m.x - CAP_HALF_WIDTH_PX, x2: m.x + CAP_HALF_WIDTH_PX, y1: m.yLow, y2: m.yLow }),
            svg("line", { class: "errbar-cap", x1: m.x - CAP_HALF_WIDTH_PX, x2: m.x + CAP_HALF_WIDTH_PX, y1: m.yHigh, y2: m.yHigh }),
          ]
        : null,
      svg("circle", { cx: m.x, cy: m.y, r: 4 }),
      named ? svg("text", { class: "point-label", x: m.x, y: m.yHigh - 7, "text-anchor": "middle" }, m.label) : null);
  });
  return svg("svg", { class: overlay ? "eval-plot overlay" : "eval-plot", width: g.width, height: g.height, viewBox: `0 0 ${g.width} ${g.height}`, role: "img", "aria-label": ariaLabel },
    grid,
    svg("text", { class: "axis-label", x: (area.left + area.right) / 2, y: g.height - 2, "text-anchor": "middle" }, "step"),
    xAxis,
    lines,
    marks);
}

/** Every evaluation with the numbers the plot leaves out (format, partial, reward, sampling). */
function pointsTable(view) {
  const rows = view.points.map((p) =>
    h("tr", { "data-label": p.label },
      h("th", { scope: "row" }, p.label === "before" || p.label === "after" ? p.label : pointWhen(p).replace("at ", "")),
      h("td", { class: "num" }, pointText(p)),
      h("td", { class: "num" }, p.n ?? DASH),
      h("td", { class: "num" }, fmtPercent(p.formatAccuracy)),
      h("td", { class: "num" }, fmtPercent(p.partialAccuracy)),
      h("td", { class: "num" }, fmtNumber(p.meanReward)),
      h("td", {}, [p.sampling, p.samplesPerRow !== null ? `${p.samplesPerRow}/row` : null].filter(Boolean).join(" · ") || DASH)));
  const col = (text) => h("th", { scope: "col" }, text);
  return h("details", { class: "eval-points" },
    h("summary", {}, `Each evaluation (${view.points.length})`),
    h("table", { class: "artifacts" },
      h("thead", {}, h("tr", {}, col("When"), col("Accuracy [95%]"), col("n"), col("Format"), col("Partial"), col("Mean reward"), col("Sampling"))),
      h("tbody", {}, rows)));
}
