// Where an interval plot draws each estimate (pure: numbers in, coordinates out, so node tests can check
// the geometry; evaljobpanel.js turns them into SVG). One row per estimate, a dot at its value and a bar
// across its 95% interval, on one horizontal axis: scores on 0–100% (an eval's four scores, a training
// job's checkpoints), or paired differences in points on an axis symmetric around a marked zero, so a
// bar crossing zero is seen to cross it. The style of evalplot.js: the axis starts where it honestly
// must, and every bar is its interval's width on it.
import { wholePercent } from "./evaltext.js";

export const INTERVAL_PLOT = { width: 420, rowHeight: 26, top: 10, bottom: 28, left: 120, right: 18 };
const MINUS = "\u2212";

/**
 * @param {{label: string, value: number|null, ci95: number[]|null}[]} rows  fractions (0.7 = 70%)
 * @param {{kind?: "score"|"difference", width?: number}} options
 * @returns {{width, height, kind, domain: number[], area: {left, top, right, bottom}, ticks: {value, x, text}[],
 *   zeroX: number|null, marks: {label, value, ci95, x, xLow, xHigh, y}[]}}  rows without a value are left out
 */
export function intervalLayout(rows, { kind = "score", width = INTERVAL_PLOT.width } = {}) {
  const size = { ...INTERVAL_PLOT, width };
  const drawn = rows.filter((r) => typeof r.value === "number" && Number.isFinite(r.value));
  const height = size.top + size.bottom + Math.max(1, drawn.length) * size.rowHeight;
  const area = { left: size.left, top: size.top, right: size.width - size.right, bottom: height - size.bottom };
  const domain = kind === "difference" ? differenceDomain(drawn) : [0, 1];
  const clamp = (v) => Math.min(Math.max(v, domain[0]), domain[1]);
  const x = (v) => area.left + ((clamp(v) - domain[0]) / (domain[1] - domain[0])) * (area.right - area.left);
  const marks = drawn.map((r, i) => {
    const [low, high] = r.ci95 || [r.value, r.value];
    return { label: r.label, value: r.value, ci95: r.ci95, x: x(r.value), xLow: x(low), xHigh: x(high), y: area.top + (i + 0.5) * size.rowHeight };
  });
  const step = kind === "difference" ? tickStep(domain[1]) : 0.25;
  const ticks = [];
  for (let i = Math.ceil(domain[0] / step - 1e-9); i * step <= domain[1] + 1e-9; i += 1) {
    const value = i === 0 ? 0 : i * step; // multiples of the step, so 0 is always a tick
    ticks.push({ value, x: x(value), text: kind === "difference" ? signedPoints(value) : `${wholePercent(value)}%` });
  }
  return { width: size.width, height, kind, domain, area, ticks, zeroX: kind === "difference" ? x(0) : null, marks };
}

/** Symmetric around 0, out to the widest interval's end rounded up to a tenth (at least 10 points, at most 100). */
function differenceDomain(rows) {
  let far = 0;
  for (const r of rows) far = Math.max(far, Math.abs(r.value), ...(r.ci95 || []).map(Math.abs));
  const top = Math.min(1, Math.max(0.1, Math.ceil(far * 10 - 1e-9) / 10));
  return [-top, top];
}

function tickStep(top) {
  return top > 0.3 ? 0.25 : top > 0.1 ? 0.1 : 0.05;
}

function signedPoints(v) {
  const p = wholePercent(v);
  return p < 0 ? `${MINUS}${-p}` : p > 0 ? `+${p}` : "0";
}
