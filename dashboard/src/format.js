// Formatting for people: every number the dashboard shows goes through here so units and
// "unknown" look the same everywhere.

const DASH = "—";

export function fmtNumber(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return DASH;
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e5)) return value.toExponential(2);
  return Number(value.toFixed(digits)).toString();
}

export function fmtPercent(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return DASH;
  return `${(value * 100).toFixed(1)}%`;
}

/** 75 -> "1m 15s"; 3 days and more are shown in days and hours. */
export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return DASH;
  let s = Math.max(0, Math.round(seconds));
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const hr = Math.floor(s / 3600);
  s -= hr * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

export function parseTime(value) {
  if (!value) return null;
  const t = Date.parse(value);
  return Number.isNaN(t) ? null : t;
}

/** "3m ago" from an ISO timestamp, relative to `nowMs` so a whole render uses one clock. */
export function fmtAge(iso, nowMs = Date.now()) {
  const t = parseTime(iso);
  if (t === null) return DASH;
  return `${fmtDuration((nowMs - t) / 1000)} ago`;
}

export function fmtDateTime(iso) {
  const t = parseTime(iso);
  if (t === null) return DASH;
  return new Date(t).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return DASH;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

export { DASH };
