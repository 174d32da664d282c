// The job page's reward sandbox panel, from JobPublic.reward_calls (service/domain/reward_calls.py): how often the
// job's own reward functions were called in their sandbox, how many calls raised or crashed their worker (errors) and
// how many passed grpo.rewards.timeout_s (timeouts: counted apart from errors), each as a share of the calls, the
// newest step's p50/p95 call latency, whether the workers could open no socket, and whether they could write only
// their own directory (or container). Either one not held is a warning: the user's code could reach the network, or
// write the run's files. `rljob status` shows the same (RewardCalls.says).
// Pure view model first, the DOM last.
import { h } from "./dom.js";
import { DASH, fmtNumber, fmtPercent } from "./format.js";

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
const count = (v) => (num(v) === null ? 0 : Math.max(0, Math.round(v)));

/** Seconds of one call: "850 ms" below a second, "2.4 s" above. */
export function fmtLatency(seconds) {
  if (seconds === null) return DASH;
  return seconds < 1 ? `${fmtNumber(seconds * 1000, 1)} ms` : `${fmtNumber(seconds, 2)} s`;
}

/** "3 (1.5%)": a count and its share of the calls; the share is left out before the first call. */
function share(n, calls) {
  return calls > 0 ? `${n} (${fmtPercent(n / calls)})` : String(n);
}

/**
 * JobPublic.reward_calls (and the spec, for what a failed call scores) -> the panel's view; null when the job has no
 * reward functions of its own, or its trainer has reported no sandboxed call yet (the service sends null then).
 * {calls, errors, timeouts, errorRate, timeoutRate, p50S, p95S, networkIsolated and writesConfined (true, false or
 *  null: not reported),
 *  onError ("zero" or "fail"), timeoutS, rows: [{key, label, value}] as text}.
 */
export function rewardCallsView(raw, spec) {
  if (!raw || typeof raw !== "object" || num(raw.calls) === null) return null;
  const calls = count(raw.calls);
  const errors = count(raw.errors);
  const timeouts = count(raw.timeouts);
  const p50S = num(raw.latency_p50_s);
  const p95S = num(raw.latency_p95_s);
  const rewards = ((spec || {}).grpo || {}).rewards || {};
  const view = {
    calls,
    errors,
    timeouts,
    errorRate: calls > 0 ? errors / calls : null,
    timeoutRate: calls > 0 ? timeouts / calls : null,
    p50S,
    p95S,
    networkIsolated: typeof raw.network_isolated === "boolean" ? raw.network_isolated : null,
    writesConfined: typeof raw.writes_confined === "boolean" ? raw.writes_confined : null,
    onError: rewards.on_error === "fail" ? "fail" : "zero", // the spec's default is zero
    timeoutS: num(rewards.timeout_s),
  };
  view.rows = [
    { key: "calls", label: "Calls", value: String(calls) },
    { key: "errors", label: "Errors", value: share(errors, calls) },
    { key: "timeouts", label: "Timeouts", value: share(timeouts, calls) },
    { key: "p50", label: "Latency p50", value: fmtLatency(p50S) },
    { key: "p95", label: "Latency p95", value: fmtLatency(p95S) },
  ];
  return view;
}

/** What the panel says about the network: {warn, text}. Only a reported false warns; unreported is said as such. */
export function networkNote(view) {
  if (view.networkIsolated === true) return { warn: false, text: "No network: the reward workers could open no socket." };
  if (view.networkIsolated === false) {
    return {
      warn: true,
      text: "Network NOT isolated: the reward workers could reach the network (neither a seccomp filter nor a network namespace on this platform); see the train log.",
    };
  }
  return { warn: false, text: "Network isolation: not reported by the trainer." };
}

/** What the panel says about writes: {warn, text}, or null when the trainer did not report it (before issue 51). */
export function writesNote(view) {
  if (view.writesConfined === true) return { warn: false, text: "Writes: only the reward workers' own directory (or their own container)." };
  if (view.writesConfined === false) {
    return {
      warn: true,
      text: "Writes NOT confined: the reward workers could write what the trainer's user can, the run's files included (no Landlock on this platform, e.g. gVisor; RLJOB_K8S_REWARD_CONTAINER closes it); see the train log.",
    };
  }
  return null;
}

/** What a failed call did to its completions, and the per-call deadline. */
export function policyText(view) {
  const onError = view.onError === "fail"
    ? "A call that raises, times out or crashes its worker stops the train stage (grpo.rewards.on_error: fail)."
    : "A call that raises, times out or crashes its worker scores its completions 0 and training goes on (grpo.rewards.on_error: zero).";
  return view.timeoutS === null ? onError : `${onError} Deadline per call: ${fmtLatency(view.timeoutS)}.`;
}

export function rewardCallsPanel(view) {
  if (!view) return null;
  const network = networkNote(view);
  const writes = writesNote(view);
  const bad = (row) => (row.key === "errors" && view.errors > 0) || (row.key === "timeouts" && view.timeouts > 0);
  return h("section", { class: "panel", "aria-labelledby": "reward-calls-h", "data-testid": "reward-calls" },
    h("h2", { id: "reward-calls-h" }, "Reward sandbox"),
    network.warn
      ? h("div", { class: "alert warn", role: "status", "data-testid": "reward-network" }, h("strong", {}, network.text))
      : h("p", { class: "hint", "data-testid": "reward-network" }, network.text),
    !writes ? null : writes.warn
      ? h("div", { class: "alert warn", role: "status", "data-testid": "reward-writes" }, h("strong", {}, writes.text))
      : h("p", { class: "hint", "data-testid": "reward-writes" }, writes.text),
    h("table", {},
      h("tbody", {}, view.rows.map((row) =>
        h("tr", { "data-testid": `reward-calls-${row.key}` },
          h("th", { scope: "row" }, row.label),
          h("td", { class: bad(row) ? "reward-calls-bad" : null }, row.value))))),
    h("p", { class: "hint" }, "Counts are the job's totals; latencies are of its newest train step. ", policyText(view)));
}
