// The text/event-stream format (WHATWG HTML, "server-sent events"), fed in whatever pieces the
// network delivers. Pure (no DOM), so node's test runner checks it (tests/dashboard/unit/).

export class SseParser {
  /** @param {(e: {type: string, id: string, data: any}) => void} onEvent  data is parsed JSON when it is JSON */
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = "";
    this.lastEventId = "";
    this.afterCR = false; // the last piece ended with CR: an LF opening the next piece is the same line end
    this.started = false;
    this.reset();
  }

  reset() {
    this.data = [];
    this.type = "";
  }

  feed(piece) {
    let text = piece;
    if (!this.started && text) {
      this.started = true;
      if (text.startsWith("\uFEFF")) text = text.slice(1); // the format allows one leading BOM
    }
    if (this.afterCR && text.startsWith("\n")) text = text.slice(1);
    this.afterCR = text.endsWith("\r");
    if (!text) return;
    this.buffer += text;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    this.buffer = lines.pop(); // keep the unterminated tail for the next piece
    for (const line of lines) this.line(line);
  }

  line(line) {
    if (line === "") {
      if (this.data.length) {
        const raw = this.data.join("\n");
        let data = raw;
        try {
          data = JSON.parse(raw);
        } catch {
          // not JSON: hand over the text as it is
        }
        this.onEvent({ type: this.type || "message", id: this.lastEventId, data });
      }
      this.reset();
      return;
    }
    if (line.startsWith(":")) return; // keep-alive comment
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.type = value;
    else if (field === "id" && !value.includes("\0")) this.lastEventId = value;
  }
}
