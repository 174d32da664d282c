// Where the eval panel draws each evaluation (pure: numbers in, coordinates out, so node tests can
// check the geometry; evalpanel.js only turns them into SVG). The x axis is the train step; the
// y axis is accuracy from 0, so two bars' heights compare honestly, up to the highest interval's
// top rounded up to a tenth (a model at 3% is not drawn as a flat line on a 0-100% axis).
import { wholePercent } from "./evaltext.js";

export const PLOT_SIZE = { width: 420, height: 210, top: 24, right: 24, bottom: 34, left: 44 };
const SAME_STEP_SPREAD_PX = 14; // points at one step (a step-N eval and `after`) sit side by side
const MAX_X_TICKS = 6;

/**
 * @param {{label: string, step: number|null, accuracy: number|null, ci95: number[]|null, series?: number, job?: string}[]} points
 *   oldest first, as evalView keeps them; several runs' points (the run diff) carry their run's
 *   `series` index and `job` label, and share the axes so they compare
 * @returns {{width, height, area: {left, top, right, bottom}, yTicks: {value, y, text}[],
 *   xTicks: {step, x}[], marks: {label, step, accuracy, ci95, series, job, x, y, yLow, yHigh}[]}}
 */
export function evalPlotLayout(points, size = PLOT_SIZE) {
  const area = { left: size.left, top: size.top, right: size.width - size.right, bottom: size.height - size.bottom };
  const drawn = points.filter((p) => p.accuracy !== null && p.step !== null);
  const yMax = topOfAxis(drawn);
  const y = (v) => area.bottom - (Math.min(Math.max(v, 0), yMax) / yMax) * (area.bottom - area.top);

  const steps = [...new Set(drawn.map((p) => p.step))].sort((a, b) => a - b);
  const lo = steps.length ? steps[0] : 0;
  const hi = steps.length ? steps[steps.length - 1] : 1;
  // One step (only `before`, say): put it in the middle instead of dividing by zero.
  const x = (s) => (hi === lo ? (area.left + area.right) / 2 : area.left + ((s - lo) / (hi - lo)) * (area.right - area.left));

  const atStep = new Map();
  for (const p of drawn) atStep.set(p.step, (atStep.get(p.step) || 0) + 1);
  const seen = new Map();
  const marks = drawn.map((p) => {
    const k = atStep.get(p.step);
    const i = seen.get(p.step) || 0;
    seen.set(p.step, i + 1);
    const offset = (i - (k - 1) / 2) * SAME_STEP_SPREAD_PX;
    const [low, high] = p.ci95 || [p.accuracy, p.accuracy];
    return {
      label: p.label, step: p.step, accuracy: p.accuracy, ci95: p.ci95, series: p.series ?? 0, job: p.job ?? null,
      x: x(p.step) + offset, y: y(p.accuracy), yLow: y(low), yHigh: y(high),
    };
  });

  const tickEvery = Math.max(1, Math.ceil(steps.length / MAX_X_TICKS));
  const xTicks = steps.filter((_, i) => i % tickEvery === 0 || i === steps.length - 1).map((s) => ({ step: s, x: x(s) }));
  const yStep = yMax > 0.5 ? 0.25 : yMax > 0.2 ? 0.1 : 0.05;
  const yTicks = [];
  for (let v = 0; v <= yMax + 1e-9; v += yStep) yTicks.push({ value: v, y: y(v), text: `${wholePercent(v)}%` });
  return { width: size.width, height: size.height, area, yTicks, xTicks, marks };
}

function topOfAxis(points) {
  let top = 0;
  for (const p of points) top = Math.max(top, p.ci95 ? p.ci95[1] : p.accuracy);
  return Math.min(1, Math.max(0.1, Math.ceil(top * 10 - 1e-9) / 10));
}
