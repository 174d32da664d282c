// How the dashboard writes numbers, durations, ages and sizes (dashboard/src/format.js).
import assert from "node:assert/strict";
import { test } from "node:test";
import { DASH, fmtAge, fmtBytes, fmtDuration, fmtNumber, fmtPercent, parseTime } from "../../../dashboard/src/format.js";

test("unknown values are a dash everywhere", () => {
  for (const fmt of [fmtNumber, fmtPercent, fmtDuration, fmtBytes]) {
    assert.equal(fmt(null), DASH);
    assert.equal(fmt(undefined), DASH);
  }
  assert.equal(fmtNumber(NaN), DASH);
  assert.equal(fmtDuration(Infinity), DASH);
  assert.equal(fmtAge("not a time"), DASH);
});

test("numbers: a few digits, exponents for the very small and very large, zero as 0", () => {
  assert.equal(fmtNumber(0.123456), "0.123");
  assert.equal(fmtNumber(2), "2");
  assert.equal(fmtNumber(-1.5), "-1.5");
  assert.equal(fmtNumber(0), "0");
  assert.equal(fmtNumber(0.0004), "4.00e-4");
  assert.equal(fmtNumber(123456), "1.23e+5");
  assert.equal(fmtNumber(0.5, 0), "1");
});

test("percent with one decimal", () => {
  assert.equal(fmtPercent(0.5), "50.0%");
  assert.equal(fmtPercent(0.0125), "1.3%");
});

test("durations: seconds, minutes, hours, then days", () => {
  assert.equal(fmtDuration(0), "0s");
  assert.equal(fmtDuration(-5), "0s");
  assert.equal(fmtDuration(59.6), "1m 0s");
  assert.equal(fmtDuration(75), "1m 15s");
  assert.equal(fmtDuration(3600 + 120 + 5), "1h 2m");
  assert.equal(fmtDuration(3 * 86400 + 4 * 3600 + 59), "3d 4h");
});

test("ages are relative to the clock passed in", () => {
  const now = Date.parse("2025-01-01T12:00:00Z");
  assert.equal(fmtAge("2025-01-01T11:57:00Z", now), "3m 0s ago");
  assert.equal(fmtAge("2025-01-01T12:00:00+00:00", now), "0s ago");
  assert.equal(parseTime(""), null);
  assert.equal(parseTime("2025-01-01T00:00:00Z"), Date.UTC(2025, 0, 1));
});

test("sizes in binary units", () => {
  assert.equal(fmtBytes(0), "0 B");
  assert.equal(fmtBytes(1023), "1023 B");
  assert.equal(fmtBytes(1536), "1.5 KiB");
  assert.equal(fmtBytes(5 * 1024 ** 3), "5.0 GiB");
  assert.equal(fmtBytes(3 * 1024 ** 5), "3072.0 TiB"); // no unit past TiB
});
