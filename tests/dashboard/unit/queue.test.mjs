// Where a QUEUED job waits, as the dashboard shows it (dashboard/src/queue.js).
import assert from "node:assert/strict";
import { test } from "node:test";
import { ordinal, queueShort, queueSentence, queueView } from "../../../dashboard/src/queue.js";

const TEAM_LIMIT = { name: "team/team-a", position: 2, reason: "TeamJobLimit", message: "team-a runs 2 of its 2 concurrent jobs" };

test("a job in no queue has no queue view and no text", () => {
  for (const raw of [null, undefined, {}, { name: "team/x", position: 1 }, "TeamJobLimit"]) {
    assert.equal(queueView(raw), null);
  }
  assert.equal(queueShort(null), "");
  assert.equal(queueSentence(null), "");
});

test("the table cell: place and reason", () => {
  assert.equal(queueShort(queueView(TEAM_LIMIT)), "#2 TeamJobLimit");
  assert.equal(queueShort(queueView({ ...TEAM_LIMIT, position: null, reason: "InsufficientQuota" })), "InsufficientQuota");
  assert.equal(queueShort(queueView({ ...TEAM_LIMIT, position: 0 })), "TeamJobLimit"); // not a place in line
});

test("the sentence: place in line, queue, and the backend's own words with the numbers", () => {
  assert.equal(queueSentence(queueView(TEAM_LIMIT)), "2nd in line in team/team-a: team-a runs 2 of its 2 concurrent jobs");
});

test("without the backend's words, a known reason is said in words and an unknown one as it comes", () => {
  const bare = { name: "team/team-a", position: 1, reason: "HostSlots" };
  assert.equal(queueSentence(queueView(bare)), "1st in line in team/team-a: the machine runs all the jobs it may at once");
  const chips = { name: "team/team-a", position: 1, reason: "HostChips" };
  assert.equal(
    queueSentence(queueView(chips)),
    "1st in line in team/team-a: the machine's TPU chips are held by another TPU job (one process at a time may hold a chip)",
  );
  const kueue = { name: "ml-queue", position: null, reason: "InsufficientQuota" };
  assert.equal(queueSentence(queueView(kueue)), "Waiting in ml-queue: InsufficientQuota");
});

test("ordinals", () => {
  assert.deepEqual([1, 2, 3, 4, 11, 12, 13, 21, 22, 103, 111].map(ordinal),
    ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "103rd", "111th"]);
});
