"""Load shedding: a bounded number of requests in flight and of open event streams; one more gets a fast
503 with Retry-After, before any work is done for it.

No queue: a request that waits for a slot only adds its wait to everyone behind it, and under overload
its client has often given up by its turn. Three kinds of request are counted apart:
- health probes (/healthz, /readyz, /metrics) are never refused: a liveness probe failing under load
  would have Kubernetes restart a service that is merely busy;
- event streams (/v1/events, /v1/jobs/{id}/events) have their own limit: they stay open for an hour,
  and a thousand dashboards must not use up the places of short requests (nor the reverse);
- log follows (logs?follow=true) are not counted here: their own limit answers 429 (api/log_follow.py).
Everything else (the API, the dashboard's files) shares `max_requests`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
EVENT_STREAM_PATH = re.compile(r"^/v1/(jobs/[^/]+/)?events$")
LOG_FOLLOW_PATH = re.compile(r"^/v1/jobs/[^/]+/logs$")


@dataclass
class Pool:
    name: str
    limit: int
    in_flight: int = 0


def _is_log_follow(scope: Scope) -> bool:
    return bool(LOG_FOLLOW_PATH.match(scope["path"])) and b"follow=true" in scope.get("query_string", b"")


class LoadSheddingMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_requests: int, max_streams: int, retry_after_s: int,
        registry: CollectorRegistry | None = None,
    ) -> None:  # fmt: skip
        self.app = app
        self.requests = Pool("requests", max_requests)
        self.streams = Pool("event streams", max_streams)
        self.retry_after_s = retry_after_s
        self.shed = Counter(
            "rljob_requests_shed", "requests refused with 503 because the service was at its limit",
            ["pool"], registry=registry,
        )  # fmt: skip

    def pool_for(self, scope: Scope) -> Pool | None:
        path = scope["path"]
        if path in PROBE_PATHS or _is_log_follow(scope):
            return None
        return self.streams if EVENT_STREAM_PATH.match(path) else self.requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pool = self.pool_for(scope) if scope["type"] == "http" else None
        if pool is None:
            await self.app(scope, receive, send)
            return
        if pool.in_flight >= pool.limit:
            self.shed.labels(pool.name).inc()
            detail = f"the service is at its limit of {pool.limit} {pool.name} at once; retry after {self.retry_after_s} s"
            response = JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": str(self.retry_after_s)})
            await response(scope, receive, send)
            return
        pool.in_flight += 1  # one event loop: no lock needed
        try:
            await self.app(scope, receive, send)
        finally:
            pool.in_flight -= 1
