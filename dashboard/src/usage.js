// The team usage view's model: GET /v1/usage (service/domain/usage_models.py: UsagePublic) turned
// into what the usage page shows. Pure, so node --test checks it without a browser.
import { DASH } from "./format.js";

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
// Queued and launching time is shown, not charged (the service bills running and cancelling).
const WAITING_PHASES = ["QUEUED", "LAUNCHING"];
const RUNNING_PHASES = ["RUNNING", "CANCELLING"];
export const USAGE_WINDOWS_DAYS = [7, 30, 90];

const sumOf = (byPhase, names) => names.reduce((acc, name) => acc + (num(byPhase && byPhase[name]) || 0), 0);

function sumView(raw) {
  const s = raw || {};
  return {
    jobs: num(s.jobs) || 0,
    waitingChipHours: sumOf(s.chip_hours, WAITING_PHASES),
    billedChipHours: num(s.billed_chip_hours) || 0,
    costUsd: num(s.cost_usd) || 0,
    unpricedChipHours: num(s.unpriced_chip_hours) || 0,
  };
}

/** UsagePublic -> {team, since, asOf, total, groups (costliest first), jobs, truncated}. */
export function usageView(raw) {
  const r = raw || {};
  const total = sumView(r.total);
  const groups = (r.groups || [])
    .map((g) => ({
      team: g.team,
      slice: `${g.accelerator} ${g.capacity}`,
      ...sumView(g),
      // The group's part of the billed chip-hours: which slices the team's time went to.
      share: total.billedChipHours > 0 ? (num(g.billed_chip_hours) || 0) / total.billedChipHours : null,
    }))
    .sort((a, b) => b.costUsd - a.costUsd || b.billedChipHours - a.billedChipHours || a.slice.localeCompare(b.slice));
  const jobs = (r.jobs || []).map((row) => {
    const u = row.usage || {};
    const seconds = Object.fromEntries(Object.entries(u.phases || {}).map(([name, a]) => [name, num(a && a.seconds)]));
    return {
      id: row.job_id,
      name: row.name,
      team: row.team,
      phase: row.phase,
      slice: `${u.accelerator} ${u.capacity}`,
      chips: num(u.chips) || 0,
      waitingHours: sumOf(seconds, WAITING_PHASES) / 3600,
      runningHours: sumOf(seconds, RUNNING_PHASES) / 3600,
      billedChipHours: num(u.billed_chip_hours) || 0,
      // null: the price table has no price for this slice and capacity.
      costUsd: num(u.cost_usd),
    };
  });
  return { team: r.team || null, since: r.since || null, asOf: r.as_of || null, total, groups, jobs, truncated: Boolean(r.truncated) };
}

/** The `since` of a window of `days` ending at `nowMs`: that day's date (UTC), as the API reads it. */
export function sinceForDays(days, nowMs) {
  return new Date(nowMs - days * 86400 * 1000).toISOString().slice(0, 10);
}

export function fmtChipHours(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return DASH;
  return value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
}

export function fmtUsd(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return DASH;
  return `$${value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}
