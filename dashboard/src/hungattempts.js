// The job page's hung attempts, from JobPublic.hangs and .hung_restarts (service/domain/run_report.py HangReport):
// each attempt the trainer's watchdog found hung (no progress event for longer than its limit), where it hung, and
// the log holding the stacks of every thread; and how many times the service restarted the job from its last
// checkpoint. `rljob status` says the same (service/cli/output.py hung_text). Pure view model first, the DOM last.
import { h } from "./dom.js";
import { fmtDuration } from "./format.js";

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

// The job's message while the service restarts it after a hang (service/domain/hangs.py hung_restart_message): the
// only place the service's limit (RLJOB_MAX_HUNG_RESTARTS) reaches the page, so "n of N" is shown only while it is there.
const RESTART_OF = /hung restart (\d+) of (\d+)/;

function attemptOf(raw) {
  if (!raw || num(raw.attempt) === null) return null;
  const stage = raw.stage ? String(raw.stage) : null;
  const step = num(raw.step);
  return {
    attempt: raw.attempt,
    time: raw.time || null,
    stage,
    step,
    idleS: num(raw.idle_s),
    limitS: num(raw.limit_s),
    stacks: String(raw.stacks || ""),
    // "train stage after step 12", as `rljob status` says where the newest hung
    where: `${stage ? `${stage} stage` : "before its first stage"}${step !== null ? ` after step ${step}` : ""}`,
  };
}

/** How many restarts the hangs cost: "hung restart 1 of 2" while the job's message says so, else the count. */
export function restartText(restarts, message, failureReason) {
  const match = RESTART_OF.exec(String(message || ""));
  if (match) return `hung restart ${match[1]} of ${match[2]}`;
  if (failureReason === "HUNG") return `restarted ${restarts} time(s), then given up (the service's limit of hung restarts)`;
  if (restarts === 0) return "not restarted (yet)";
  return restarts === 1 ? "restarted once from its last checkpoint" : `restarted ${restarts} times from its last checkpoint`;
}

/** JobPublic -> {attempts (newest last), restarts, restartText}; null when no attempt hung. */
export function hungAttemptsView(raw) {
  const attempts = (Array.isArray(raw.hangs) ? raw.hangs : []).map(attemptOf).filter(Boolean);
  if (!attempts.length) return null;
  const restarts = Math.max(0, Math.round(num(raw.hung_restarts) ?? 0));
  return { attempts, restarts, restartText: restartText(restarts, raw.message, raw.failure && raw.failure.reason) };
}

export function hungAttemptsPanel(view) {
  if (!view) return null;
  const head = ["Attempt", "Where", "No progress for", "Limit", "Stacks in"];
  return h("section", { class: "panel", "aria-labelledby": "hung-h", "data-testid": "hung" },
    h("h2", { id: "hung-h" }, "Hung attempts"),
    h("div", { class: "alert warn", role: "status", "data-testid": "hung-summary" },
      `${view.attempts.length} attempt(s) hung: no progress event for longer than the hang limit; `, view.restartText, "."),
    h("table", {},
      h("thead", {}, h("tr", {}, head.map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, view.attempts.map((a) =>
        h("tr", { "data-testid": `hung-attempt-${a.attempt}` },
          h("th", { scope: "row" }, String(a.attempt)),
          h("td", {}, a.where),
          h("td", {}, fmtDuration(a.idleS)),
          h("td", {}, fmtDuration(a.limitS)),
          h("td", { class: "mono" }, a.stacks))))),
    h("p", { class: "hint" }, "The stacks of every thread of the trainer and its stage process are in that log (the log tail below, or `rljob logs`). "
      + "A job that hangs each time: raise spec.hang_timeout_s if its steps are this slow, or fix where it waits."));
}
