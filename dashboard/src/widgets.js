// Pieces shared by the board and the job page.
import { h } from "./dom.js";
import { fmtDuration } from "./format.js";
import { STATUS_TEXT } from "./live.js";

export function phaseBadge(phase) {
  const p = String(phase || "unknown");
  return h("span", { class: `phase phase-${p.toLowerCase()}`, "data-phase": p }, p);
}

// Learning-health verdicts (service/domain/learning_health.py) as people read them: the badge's
// text, the job page note's title, and whether that note is calm (something to read: the job is
// training and the message says what is known) or an alert (something to act on).
export const HEALTH = {
  improving: { text: "improving", title: "Improving", calm: true },
  flat: { text: "flat", title: "Flat: no improvement shown", calm: true },
  signal: { text: "signal", title: "Learning signal, no improvement shown yet", calm: true },
  "no-signal": { text: "no signal", title: "Not learning: no signal", calm: false },
  collapsed: { text: "collapsed", title: "Collapsed: the policy stopped writing", calm: false },
  stalled: { text: "stalled", title: "Stalled", calm: false },
  diverging: { text: "diverging", title: "Diverging", calm: false },
};

/** How a verdict is shown; one this dashboard does not know (a newer service's) as itself, as an alert. */
export function healthLook(verdict) {
  return HEALTH[verdict] || { text: verdict, title: verdict, calm: false };
}

/** A pill for a job's learning-health verdict; its message is the tooltip. Null before the first step. */
export function healthBadge(health) {
  if (!health) return null;
  const v = health.verdict;
  return h("span", { class: `health health-${v}`, "data-verdict": v, title: health.message }, healthLook(v).text);
}

/** A native <progress> (screen readers announce it) with "step / total · ETA" under it. */
export function progressCell(job, { terminal = false } = {}) {
  const { step, totalSteps, etaS } = job;
  if (!totalSteps) {
    return h("div", { class: "progress" }, h("span", { class: "sub" }, job.stage ? `${job.stage}…` : "not started"));
  }
  const done = Math.min(step ?? 0, totalSteps);
  const label = `${done} / ${totalSteps} steps`;
  const eta = !terminal && etaS !== null && etaS !== undefined ? ` · ETA ${fmtDuration(etaS)}` : "";
  return h(
    "div",
    { class: "progress" },
    h("progress", { max: totalSteps, value: done, "aria-label": `Training progress: ${label}` }),
    h("span", { class: "sub", "data-testid": "progress-text" }, label + eta),
  );
}

/** A polite live region saying whether the view is live, polling or offline. */
export function liveStatus() {
  const el = h("p", { class: "live-status", role: "status", "aria-live": "polite", "data-status": "connecting" });
  el.textContent = STATUS_TEXT.connecting;
  return {
    el,
    set(status) {
      if (el.dataset.status === status) return;
      el.dataset.status = status;
      el.textContent = STATUS_TEXT[status] || status;
    },
  };
}

export function errorBox(title, message, ...extra) {
  return h("div", { class: "alert error", role: "alert" }, h("strong", {}, title), message ? h("p", {}, message) : null, ...extra);
}

/** The message to show for an ApiError of any kind. */
export function describeError(err) {
  switch (err && err.kind) {
    case "unreachable":
      return ["Cannot reach the rljob service", `Nothing answered at ${window.location.origin}. Is "rljob serve" running? Retrying automatically.`];
    case "unauthorized":
      return ["Your token was not accepted", "Sign in again with a valid API token."];
    case "not_found":
      return ["Not found", err.message];
    default:
      return ["The service returned an error", err ? err.message : "unknown error"];
  }
}
