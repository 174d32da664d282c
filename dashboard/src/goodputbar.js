// The job page's goodput panel, from JobPublic.goodput (model.js's goodputView): where the job's
// wall-clock time went, as one stacked bar whose segments are the parts (queued, start-up, convert,
// warm-up, rollout, log-probs, update, weight sync, checkpoint, eval, export, other) in the order they add up,
// a legend with each part's time and share, and the productive share (rollout + update). The bar is
// an SVG with a viewBox of the wall time, so segment widths are attributes (the page's CSP forbids
// inline style) and tests read each part's seconds from its data-seconds attribute.
import { h } from "./dom.js";
import { fmtDuration, fmtPercent } from "./format.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const BAR_HEIGHT = 10; // viewBox units; the SVG is stretched to the panel's width by the stylesheet

// Names as people read them; colours in styles.css (.gp-<part>).
export const PART_LABELS = {
  queued: "Queued",
  startup: "Start-up",
  convert: "Convert",
  warmup: "Warm-up (compile, load)",
  rollout: "Rollout",
  logprobs: "Log-probs",
  update: "Update",
  weight_sync: "Weight sync",
  checkpoint: "Checkpoint",
  eval: "Eval",
  export: "Export",
  other: "Other",
};

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  for (const child of children) el.append(typeof child === "string" ? document.createTextNode(child) : child);
  return el;
}

/** The bar's segments: [{part, seconds, x, share}] for parts that took time, in the service's order. */
export function goodputSegments(goodput) {
  if (!goodput || !(goodput.wallS > 0)) return [];
  let x = 0;
  const out = [];
  for (const [part, seconds] of goodput.parts) {
    if (!(seconds > 0)) continue;
    out.push({ part, seconds, x, share: seconds / goodput.wallS });
    x += seconds;
  }
  return out;
}

export function goodputPanel(goodput) {
  const heading = h("h2", { id: "goodput-h" }, "Where the time went");
  const segments = goodputSegments(goodput);
  if (!segments.length) {
    return h("section", { class: "panel goodput", "aria-labelledby": "goodput-h", "data-testid": "goodput" }, heading,
      h("p", { class: "hint" }, "No time measured yet."));
  }
  const total = Math.max(goodput.wallS, segments.reduce((sum, s) => sum + s.seconds, 0));
  const label = (s) => `${PART_LABELS[s.part] || s.part}: ${fmtDuration(s.seconds)} (${fmtPercent(s.share)})`;
  const bar = svg("svg", {
    class: "goodput-bar", viewBox: `0 0 ${total} ${BAR_HEIGHT}`, preserveAspectRatio: "none", role: "img",
    "aria-label": `Wall time ${fmtDuration(goodput.wallS)}: ${segments.map(label).join(", ")}`, "data-testid": "goodput-bar",
  }, ...segments.map((s) => svg("rect", {
    class: `gp-${s.part}`, x: s.x, y: 0, width: s.seconds, height: BAR_HEIGHT,
    "data-part": s.part, "data-seconds": s.seconds,
  }, svg("title", {}, label(s)))));
  const legend = h("ul", { class: "goodput-legend" }, segments.map((s) =>
    h("li", { "data-part": s.part }, h("span", { class: "swatch" }, svg("svg", { viewBox: "0 0 1 1" }, svg("rect", { class: `gp-${s.part}`, width: 1, height: 1 }))), label(s))));
  const productive = goodput.productiveFraction;
  return h("section", { class: "panel goodput", "aria-labelledby": "goodput-h", "data-testid": "goodput" },
    heading,
    h("p", { class: "goodput-headline", "data-testid": "goodput-headline" },
      `${productive === null ? "—" : fmtPercent(productive)} productive (rollout + update) of ${fmtDuration(goodput.wallS)}`),
    bar,
    legend);
}
