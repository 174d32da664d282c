// The one place the dashboard talks HTTP to the rljob service. Every request carries the
// team's API token as a bearer header; failures become an ApiError with a `kind` the views turn
// into a message (unauthorized, unreachable, not_found, http).
import { SseParser } from "./sse.js";

export class ApiError extends Error {
  constructor(kind, message, status = 0) {
    super(message);
    this.kind = kind;
    this.status = status;
  }
}

const TOKEN_KEY = "rljob.token";

// sessionStorage, not localStorage: the token dies with the tab, so a shared laptop does not keep
// a team's credentials after the browser closes.
export const tokenStore = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (token) => sessionStorage.setItem(TOKEN_KEY, token),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

async function errorFrom(response) {
  let detail = "";
  try {
    const body = await response.json();
    detail = typeof body.detail === "string" ? body.detail : body.message || JSON.stringify(body.detail ?? body);
  } catch {
    detail = response.statusText;
  }
  if (response.status === 401) return new ApiError("unauthorized", detail || "token not accepted", 401);
  if (response.status === 404) return new ApiError("not_found", detail || "not found", 404);
  return new ApiError("http", `${response.status}: ${detail}`, response.status);
}

export class Api {
  constructor(token, { onUnauthorized } = {}) {
    this.token = token;
    this.onUnauthorized = onUnauthorized || (() => {});
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.token}`, Accept: "application/json", ...extra };
  }

  /** fetch() that turns network failures and non-2xx answers into ApiError (and 401 into a sign-out). */
  async send(url, init) {
    let response;
    try {
      response = await fetch(url, { ...init, cache: "no-store" });
    } catch (err) {
      if (err.name === "AbortError") throw err;
      throw new ApiError("unreachable", "cannot reach the rljob service");
    }
    if (!response.ok) {
      const error = await errorFrom(response);
      if (error.kind === "unauthorized") this.onUnauthorized(error);
      throw error;
    }
    return response;
  }

  async request(method, path, { params, body, signal } = {}) {
    const url = new URL(path, window.location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
    }
    const response = await this.send(url, {
      method,
      signal,
      headers: this.headers(body ? { "Content-Type": "application/json" } : {}),
      body: body ? JSON.stringify(body) : undefined,
    });
    if (response.status === 204) return null;
    const type = response.headers.get("content-type") || "";
    return type.includes("json") ? response.json() : response.text();
  }

  get(path, params, signal) {
    return this.request("GET", path, { params, signal });
  }

  post(path, body, signal) {
    return this.request("POST", path, { body, signal });
  }

  /**
   * Open a Server-Sent Events stream with fetch(), because EventSource cannot send an
   * Authorization header. Resolves when the server ends the stream; calls onEvent per event.
   */
  async stream(path, { onEvent, onOpen, lastEventId, signal }) {
    const headers = this.headers({ Accept: "text/event-stream" });
    if (lastEventId) headers["Last-Event-ID"] = lastEventId;
    const response = await this.send(new URL(path, window.location.origin), { headers, signal });
    if (!(response.headers.get("content-type") || "").includes("text/event-stream") || !response.body) {
      throw new ApiError("http", "the service did not answer with an event stream");
    }
    if (onOpen) onOpen();
    const parser = new SseParser(onEvent);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.feed(value);
      }
    } catch (err) {
      if (err.name === "AbortError") throw err;
      throw new ApiError("unreachable", "the event stream was interrupted");
    }
  }
}
