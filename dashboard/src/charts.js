// Step-indexed line charts drawn with uPlot (small, canvas-based, fast for long runs).
// Each chart lives in a <figure> whose caption states the latest value in text, so the numbers
// are available to screen readers and to tests without reading pixels.
import uPlot from "uplot";
import { h } from "./dom.js";
import { fmtNumber } from "./format.js";

const HEIGHT_PX = 190;
const BLUE = "#1f5fbf";
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
 * @param {{label: string, stroke?: string, fill?: string, hidden?: boolean}[]} series  y series;
 *   a series with `band: [upperIndex, lowerIndex]` on the options draws the spread between them.
 */
export function makeChart(title, series, { bands = [], format = fmtNumber, yRange } = {}) {
  const latest = h("span", { class: "latest" });
  const plotEl = h("div", { class: "plot", "aria-hidden": "true" });
  const emptyEl = h("p", { class: "no-data" }, "No data yet");
  const figure = h(
    "figure",
    { class: "chart panel", "data-chart": title, "data-points": "0" },
    h("figcaption", {}, h("span", {}, title), latest),
    emptyEl,
    plotEl,
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
      const last = n ? ys[0][n - 1] : null;
      latest.textContent = n ? `${format(last)} at step ${xs[n - 1]}` : "";
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
