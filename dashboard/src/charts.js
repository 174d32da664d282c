// Step-indexed line charts drawn with uPlot (small, canvas-based, fast for long runs).
// Each chart lives in a <figure> whose caption states the latest value in text, so the numbers
// are available to screen readers and to tests without reading pixels.
import uPlot from "uplot";
import { h } from "./dom.js";
import { fmtNumber } from "./format.js";

const HEIGHT_PX = 190;
const BLUE = "#1f5fbf";
// Runs overlaid on one chart (the run diff), in order: blue and orange first, a pair that stays
// apart for the common colour-vision deficiencies. styles.css's .series-N classes use the same.
export const SERIES_COLORS = ["#1f5fbf", "#c45a00", "#2a9d8f", "#8e44ad"];
const STEP_INCREMENTS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

// uPlot's default range for a flat series at 0 is 0..100, which reads as "the KL is tiny on a
// huge scale"; pad flat series by 10% of their value (or 1) instead.
function flatSafeRange(u, min, max) {
  if (min === null || max === null) return [0, 1];
  if (min === max) {
    const pad = Math.abs(min) * 0.1 || 1;
    return [min - pad, max + pad];
  }
  return uPlot.rangeNum(min, max, 0.1, true);
}

/**
 * @param {string} title
 * @param {{label: string, stroke?: string, fill?: string, hidden?: boolean, colorClass?: string}[]} series
 *   y series; a series with `band: [upperIndex, lowerIndex]` on the options draws the spread between them.
 * @param {{legend?: boolean}} options  legend: a list under the plot naming each series with its
 *   colour (`colorClass`), point count and latest value, for charts of several runs; without it the
 *   caption states the first series' latest value.
 */
export function makeChart(title, series, { bands = [], format = fmtNumber, yRange, legend = false } = {}) {
  const latest = h("span", { class: "latest" });
  const plotEl = h("div", { class: "plot", "aria-hidden": "true" });
  const emptyEl = h("p", { class: "no-data" }, "No data yet");
  const legendEl = legend ? h("ul", { class: "chart-legend" }) : null;
  const figure = h(
    "figure",
    { class: "chart panel", "data-chart": title, "data-points": "0" },
    h("figcaption", {}, h("span", {}, title), latest),
    emptyEl,
    plotEl,
    legendEl,
  );
  let plot = null;
  let data = null;

  const opts = (width) => ({
    width,
    height: HEIGHT_PX,
    legend: { show: false }, // one line per chart (reward: its band), named in the caption
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: false }, y: { range: yRange || flatSafeRange } },
    // Steps are whole numbers: only integer tick increments on the x axis.
    axes: [{ label: "step", size: 34, labelSize: 18, incrs: STEP_INCREMENTS }, { size: 56 }],
    series: [
      { label: "step" },
      ...series.map((s) => ({
        label: s.label,
        stroke: s.stroke || BLUE,
        width: s.width ?? 2,
        fill: s.fill,
        show: !s.hidden,
        spanGaps: true,
        // Unset: uPlot draws points only while they are sparse enough, so one step is still visible.
        points: s.points === undefined ? { size: 6 } : { show: s.points, size: 6 },
      })),
    ],
    bands,
  });

  const widthNow = () => Math.max(240, Math.floor(plotEl.clientWidth || figure.clientWidth - 32 || 480));

  // Resize with the panel so the charts fill a laptop screen's two columns.
  const observer = new ResizeObserver(() => {
    if (plot) plot.setSize({ width: widthNow(), height: HEIGHT_PX });
  });
  observer.observe(figure);

  return {
    el: figure,
    /** @param {number[]} xs  @param {(number|null)[][]} ys  one array per series */
    update(xs, ys) {
      const n = xs.length;
      figure.dataset.points = String(n);
      figure.dataset.lastStep = n ? String(xs[n - 1]) : "";
      emptyEl.hidden = n > 0;
      plotEl.hidden = n === 0;
      if (legendEl) fillLegend(legendEl, series, xs, ys, format);
      else latest.textContent = n ? `${format(ys[0][n - 1])} at step ${xs[n - 1]}` : "";
      if (!n) return;
      data = [xs, ...ys];
      if (!plot) plot = new uPlot(opts(widthNow()), data, plotEl);
      else plot.setData(data);
    },
    destroy() {
      observer.disconnect();
      if (plot) plot.destroy();
    },
  };
}

/** One item per series: a colour swatch, the label, and how many points it has with the newest. */
function fillLegend(el, series, xs, ys, format) {
  el.replaceChildren(...series.map((s, i) => {
    const values = ys[i] || [];
    let points = 0;
    let last = -1;
    values.forEach((v, j) => {
      if (v !== null && v !== undefined) {
        points += 1;
        last = j;
      }
    });
    const newest = last >= 0 ? `${format(values[last])} at step ${xs[last]}` : "no points";
    return h("li", { "data-series": s.label, "data-points": String(points) },
      h("span", { class: `swatch ${s.colorClass || ""}`, "aria-hidden": "true" }),
      h("span", { class: "series-label" }, s.label),
      h("span", { class: "latest" }, ` ${newest}`));
  }));
}

/**
 * Several runs' values of one metric on one chart, each in its own colour (`index` picks it, so a
 * run keeps its colour on every chart) and named in the legend.
 * @param {{index: number, label: string}[]} runs
 */
export function overlayChart(title, runs) {
  return makeChart(
    title,
    runs.map((r) => ({ label: r.label, stroke: SERIES_COLORS[r.index % SERIES_COLORS.length], colorClass: `series-${r.index % SERIES_COLORS.length}` })),
    { legend: true },
  );
}

/** Reward: mean as a line, mean ± std as a shaded band between two faint series. */
export function rewardChart() {
  return makeChart(
    "Reward (mean, band ± 1 std)",
    [
      { label: "mean", stroke: BLUE },
      { label: "+1 std", stroke: "rgba(31,95,191,0.25)", width: 1, points: false },
      { label: "−1 std", stroke: "rgba(31,95,191,0.25)", width: 1, points: false },
    ],
    { bands: [{ series: [2, 3], fill: "rgba(31,95,191,0.15)" }] },
  );
}
