// Where a QUEUED job waits (JobPublic.queue: a Kueue LocalQueue, or the local launcher's team queue)
// as the board and the job page show it. Pure: the service's JSON in, text out.

// Reasons the service's backends give, in words; any other (Kueue's own) is shown as it comes.
export const QUEUE_REASON_TEXT = {
  TeamJobLimit: "the team runs all the jobs it may at once",
  TeamChipLimit: "the team holds all the TPU chips it may at once",
  HostChips: "the machine's TPU chips are held by another TPU job (one process at a time may hold a chip)",
  HostSlots: "the machine runs all the jobs it may at once",
  Preempted: "preempted; resumes from its last checkpoint when admitted again",
};

const posInt = (v) => (Number.isInteger(v) && v > 0 ? v : null);

/** JobPublic.queue -> {name, position, reason, message}; null when the job waits in no backend's queue. */
export function queueView(raw) {
  if (!raw || typeof raw !== "object" || !raw.reason) return null;
  return {
    name: String(raw.name || ""),
    position: posInt(raw.position),
    reason: String(raw.reason),
    message: raw.message ? String(raw.message) : "",
  };
}

/** For a table cell: "#2 TeamJobLimit", or the reason alone when the backend gives no place. */
export function queueShort(queue) {
  if (!queue) return "";
  return queue.position === null ? queue.reason : `#${queue.position} ${queue.reason}`;
}

/** For people: "2nd in line in team/team-a: team-a runs 2 of its 2 concurrent jobs". */
export function queueSentence(queue) {
  if (!queue) return "";
  const where = queue.name ? ` in ${queue.name}` : "";
  const place = queue.position === null ? `Waiting${where}` : `${ordinal(queue.position)} in line${where}`;
  const why = queue.message || QUEUE_REASON_TEXT[queue.reason] || queue.reason;
  return `${place}: ${why}`;
}

export function ordinal(n) {
  const tens = n % 100;
  if (tens >= 11 && tens <= 13) return `${n}th`;
  return `${n}${{ 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th"}`;
}
