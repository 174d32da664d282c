// The job page's estimate panel, from JobPublic.estimate (made at submit) and JobPublic.estimate_actuals (once the
// job has ended): each figure's expected value and range, and beside it the actual and whether it fell inside, as
// `rljob status` shows them (service/cli/estimate_text.py). Pure view model first, the DOM last.
import { h } from "./dom.js";
import { fmtDuration } from "./format.js";
import { humanBytes } from "./storage.js";

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

function rangeOf(raw) {
  if (!raw || num(raw.expected) === null) return null;
  return { expected: raw.expected, low: num(raw.low), high: num(raw.high) };
}

function actualOf(raw) {
  if (!raw) return null;
  return { actual: num(raw.actual), within: typeof raw.within === "boolean" ? raw.within : null };
}

const FIGURES = [
  // [key, label, how to show a value]
  ["wait_s", "Wait", fmtDuration],
  ["run_s", "Run", fmtDuration],
  ["wall_s", "Wall", fmtDuration],
  ["chip_hours", "Chip-hours", (v) => v.toFixed(3)],
  ["cost_usd", "Cost", (v) => `$${v.toFixed(2)}`],
  ["storage_bytes", "Storage", (v) => humanBytes(Math.round(v))],
];

/** JobPublic.estimate and .estimate_actuals -> {basis, detail, historyIds, queuePosition, rows}; null without an estimate.
 * Each row: {key, label, expected, range, actual, within} as text (a dash where there is none). */
export function estimateView(raw, actualsRaw) {
  if (!raw || typeof raw.basis !== "string") return null;
  const rows = FIGURES.map(([key, label, show]) => {
    const range = key === "storage_bytes" ? (num(raw.storage_bytes) === null ? null : { expected: raw.storage_bytes, low: null, high: null }) : rangeOf(raw[key]);
    const actual = actualOf(actualsRaw && actualsRaw[key]);
    return {
      key,
      label,
      expected: range ? show(range.expected) : "—",
      range: range && range.low !== null && range.high !== null ? `${show(range.low)} – ${show(range.high)}` : "",
      actual: actual && actual.actual !== null ? show(actual.actual) : null,
      within: actual ? actual.within : null,
    };
  });
  return {
    basis: raw.basis,
    detail: String(raw.basis_detail || ""),
    historyIds: Array.isArray(raw.history_job_ids) ? raw.history_job_ids : [],
    queuePosition: num(raw.queue_position),
    ended: Boolean(actualsRaw),
    rows,
  };
}

/** "inside", "outside" or "" (no range or no actual). */
export function verdictText(row) {
  if (row.within === true) return "inside";
  if (row.within === false) return "outside";
  return "";
}

export function estimatePanel(view) {
  if (!view) return null;
  const head = ["Figure", "Estimate", "Range", ...(view.ended ? ["Actual", ""] : [])];
  const rows = view.rows.map((row) =>
    h("tr", { "data-testid": `estimate-${row.key}` },
      h("th", { scope: "row" }, row.label),
      h("td", {}, row.expected),
      h("td", {}, row.range),
      ...(view.ended ? [h("td", {}, row.actual ?? "—"), h("td", { class: `estimate-${verdictText(row) || "none"}` }, verdictText(row))] : [])));
  const place = view.queuePosition === null ? null : view.queuePosition === 0 ? "admitted at once" : `${view.queuePosition} in line`;
  return h("section", { class: "panel", "aria-labelledby": "estimate-h", "data-testid": "estimate" },
    h("h2", { id: "estimate-h" }, view.ended ? "Estimate vs actual" : "Estimate"),
    h("p", { class: "hint" }, `${view.basis === "history" ? "From history" : "From a formula"}: ${view.detail}`,
      place ? ` Place in line at submit: ${place}.` : ""),
    h("table", {}, h("thead", {}, h("tr", {}, head.map((name) => h("th", { scope: "col" }, name)))), h("tbody", {}, rows)));
}
