// Keeps a view up to date: the service's SSE stream when it can, polling when it cannot.
// Reconnects with a bounded backoff and resumes with Last-Event-ID, so a restart of the service
// or a dropped proxy connection costs a few seconds of staleness, not a reload.

const MIN_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 15000;

export class LiveFeed {
  /**
   * @param {object} o
   * @param {import("./api.js").Api} o.api
   * @param {string} o.path             SSE endpoint
   * @param {(e: {type: string, id: string, data: any}) => void} o.onEvent
   * @param {() => Promise<void>} o.poll  refreshes the view over plain REST
   * @param {(s: "connecting"|"live"|"polling"|"offline"|"ended") => void} o.onStatus
   * @param {() => boolean} [o.finished] true once nothing more can change (terminal job)
   * @param {number} [o.pollIntervalMs]
   */
  constructor({ api, path, onEvent, poll, onStatus, finished = () => false, pollIntervalMs = 5000 }) {
    Object.assign(this, { api, path, onEvent, poll, onStatus, finished, pollIntervalMs });
    this.controller = new AbortController();
    this.pollTimer = null;
    this.lastEventId = "";
  }

  start() {
    this.onStatus("connecting");
    this.loop();
    return this;
  }

  stop() {
    this.controller.abort();
    this.stopPolling();
  }

  get stopped() {
    return this.controller.signal.aborted;
  }

  async loop() {
    let backoff = MIN_BACKOFF_MS;
    while (!this.stopped) {
      try {
        await this.api.stream(this.path, {
          signal: this.controller.signal,
          lastEventId: this.lastEventId,
          onOpen: () => {
            backoff = MIN_BACKOFF_MS;
            this.stopPolling();
            this.onStatus("live");
          },
          onEvent: (event) => {
            if (event.id) this.lastEventId = event.id;
            this.onEvent(event);
          },
        });
        // The server closed the stream on purpose (a job stream ends after the terminal phase).
        if (this.finished()) {
          this.onStatus("ended");
          return;
        }
      } catch (err) {
        if (this.stopped || err.name === "AbortError") return;
        if (err.kind === "unauthorized") return; // the app returns to the login page
        this.startPolling(err.kind === "unreachable" ? "offline" : "polling");
      }
      await this.sleep(backoff);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }

  startPolling(status) {
    this.onStatus(status);
    if (this.pollTimer !== null) return;
    const tick = async () => {
      try {
        await this.poll();
        if (this.pollTimer !== null) this.onStatus("polling");
      } catch (err) {
        if (err.kind === "unreachable") this.onStatus("offline");
      }
    };
    this.pollTimer = setInterval(tick, this.pollIntervalMs);
    tick();
  }

  stopPolling() {
    if (this.pollTimer !== null) clearInterval(this.pollTimer);
    this.pollTimer = null;
  }

  sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.controller.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

export const STATUS_TEXT = {
  connecting: "Connecting…",
  live: "Live",
  polling: "Live stream unavailable — refreshing every 5 s",
  offline: "Cannot reach the rljob service — retrying",
  ended: "Finished — no more updates",
};
