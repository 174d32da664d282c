// The dashboard's event-stream parser (dashboard/src/sse.js), fed the way a network delivers:
// whole, byte by byte, and cut between the CR and the LF of a line end.
import assert from "node:assert/strict";
import { test } from "node:test";
import { SseParser } from "../../../dashboard/src/sse.js";

const STREAM =
  ": keepalive\r\n\r\n" +
  "id: 7\r\nevent: phase\r\ndata: {\"phase\":\r\ndata: \"RUNNING\"}\r\n\r\n" +
  "id: 8\r\ndata: plain text\r\n\r\n" +
  "event: progress\r\ndata: {\"step\": 3}\r\n\r\n";
const EXPECTED = [
  { type: "phase", id: "7", data: { phase: "RUNNING" } },
  { type: "message", id: "8", data: "plain text" },
  { type: "progress", id: "8", data: { step: 3 } }, // the id carries over (the format says so)
];

function parse(pieces) {
  const events = [];
  const parser = new SseParser((e) => events.push(e));
  for (const piece of pieces) parser.feed(piece);
  return events;
}

test("a stream in one piece", () => {
  assert.deepEqual(parse([STREAM]), EXPECTED);
});

test("a stream one character at a time", () => {
  assert.deepEqual(parse([...STREAM]), EXPECTED);
});

test("CRLF split across pieces is one line end, not two", () => {
  // Every CR ends a piece, so every LF opens the next one.
  const pieces = STREAM.split(/(?<=\r)/);
  assert.ok(pieces.length > 10 && pieces.slice(1).every((p) => p.startsWith("\n")));
  assert.deepEqual(parse(pieces), EXPECTED);
});

test("an id that comes after a CRLF split still belongs to its event", () => {
  // Read as two line ends, the LF would be a blank line and send "a" before its id arrives.
  assert.deepEqual(parse(["data: a\r", "\nid: 5\r\n\r\n"]), [{ type: "message", id: "5", data: "a" }]);
});

test("a lone LF after a CRLF split is a blank line of its own", () => {
  assert.deepEqual(parse(["data: a\r", "\n", "\n"]), [{ type: "message", id: "", data: "a" }]);
});

test("bare CR and bare LF end lines too; a leading BOM is dropped", () => {
  assert.deepEqual(parse(["\uFEFFdata: a\rdata: b\r\rdata: c\n\n"]), [
    { type: "message", id: "", data: "a\nb" },
    { type: "message", id: "", data: "c" },
  ]);
});

test("an unfinished event at the end is not dispatched; blocks without data are not events", () => {
  assert.deepEqual(parse(["id: 1\n\nretry: 10\n\ndata: never ended\n"]), []);
});
