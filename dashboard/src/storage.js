// The run directory's size (JobPublic.storage: the trainer's newest measurement) as one line, written as
// `rljob status` writes it (service/cli/storage_text.py): the total, then the biggest parts.
import { h } from "./dom.js";

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
const SHOWN_PARTS = 3;

/** 1536 -> "1.5 KiB", 199229440 -> "190 MiB": whole bytes below 1 KiB, one decimal below 10. */
export function humanBytes(count) {
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  if (unit === 0) return `${count} B`;
  return `${value < 10 ? value.toFixed(1) : value.toFixed(0)} ${UNITS[unit]}`;
}

/** JobPublic.storage -> {totalBytes, parts: [[name, bytes]] biggest first, complete}; null before the first measurement. */
export function storageView(raw) {
  if (!raw || typeof raw.total_bytes !== "number") return null;
  const parts = Object.entries(raw.parts || {})
    .filter(([, size]) => size > 0)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  return { totalBytes: raw.total_bytes, parts, complete: raw.complete !== false };
}

export function storageText(view) {
  const named = view.parts.slice(0, SHOWN_PARTS).map(([name, size]) => `${name} ${humanBytes(size)}`);
  if (view.parts.length > SHOWN_PARTS) named.push("...");
  return `${humanBytes(view.totalBytes)}${named.length ? ` (${named.join(", ")})` : ""}${view.complete ? "" : " (incomplete: walk limit)"}`;
}

/** Under the artifacts: what the run directory holds now (rljob deletes nothing: it stays until someone does). */
export function storageLine(view) {
  if (!view) return null;
  return h("p", { class: "hint", "data-testid": "storage" }, h("strong", {}, "Run directory: "), storageText(view));
}
