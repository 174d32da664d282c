"""Load shedding: bounded requests in flight and open event streams; one more gets a fast 503 with
Retry-After, before any work is done for it.

No queue: a request that waits for a slot only adds its wait to everyone behind it, and under overload
its client has often given up by its turn. Requests are counted by who sends them, after the token is
checked, so that nobody without a valid token can take the places of those with one:
- health probes (/healthz, /readyz, /metrics) are never refused: a liveness probe failing under load
  would have Kubernetes restart a service that is merely busy;
- a request with a valid token counts in `requests`, where each team has a share of its own
  (`requests_per_team`), must send its body within `body_timeout_s` (408) and must be answered within
  `request_deadline_s` (a 503 if nothing was sent yet, else the response is cut), so one team's slow
  bodies, slow readers or slow log reads hold at most its share, and not for long; or, for an event stream (/v1/events,
  /v1/jobs/{id}/events), in `event streams`, where each token also has a share of its own
  (`max_streams_per_token`): streams stay open for an hour, and one client must not hold them all;
- anything else (no token, an unknown or revoked one, the dashboard's files) counts in `anonymous`, a
  small budget of its own; a body it sends must arrive within `anonymous_body_timeout_s` or the request ends with
  408, so slow uploads without a valid token hold only anonymous places, and not for long;
- a token not remembered yet is looked up in the store at most `max_token_lookups` at a time (requests
  with the same token wait for one lookup), so a flood of made-up tokens costs bounded work;
- log follows (logs?follow=true) are not counted here: their own limit answers 429 (api/log_follow.py).
The caller found here is left in the request's state, and the route's own token check reuses it; the connection
the request came on is told, so it no longer counts among the connections without a token
(service/unauthenticated_connections.py).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter as Tally
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi.concurrency import run_in_threadpool
from prometheus_client import CollectorRegistry, Counter
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.disconnect import has_body
from service.domain.records.errors import StoreUnavailable, Unauthenticated
from service.domain.records.models import Caller
from service.unauthenticated_connections import mark_authenticated

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
EVENT_STREAM_PATH = re.compile(r"^/v1/(jobs/[^/]+/)?events$")
LOG_FOLLOW_PATH = re.compile(r"^/v1/jobs/[^/]+/logs$")
CALLER_STATE = "caller"  # scope["state"] key the route's token check reads (api/deps.py)


@dataclass
class Pool:
    name: str
    limit: int
    in_flight: int = 0


@dataclass(frozen=True)
class Limits:
    requests: int
    requests_per_team: int
    streams: int
    streams_per_token: int
    anonymous: int
    token_lookups: int
    anonymous_body_timeout_s: float
    body_timeout_s: float
    request_deadline_s: float
    max_body_bytes: int


def _is_log_follow(scope: Scope) -> bool:
    return bool(LOG_FOLLOW_PATH.match(scope["path"])) and b"follow=true" in scope.get("query_string", b"")


def _authorization(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return str(value.decode("latin-1"))
    return None


class LoadSheddingMiddleware:
    def __init__(self, app: ASGIApp, *, limits: Limits, retry_after_s: int, registry: CollectorRegistry | None = None) -> None:
        self.app = app
        self.limits = limits
        self.requests = Pool("requests", limits.requests)
        self.streams = Pool("event streams", limits.streams)
        self.anonymous = Pool("requests without a valid token", limits.anonymous)
        self.lookups = Pool("token lookups", limits.token_lookups)
        self.streams_by_token: Tally[str] = Tally()
        self.requests_by_team: Tally[str] = Tally()
        self._lookups_by_header: dict[str, asyncio.Future[Caller | None]] = {}
        self.retry_after_s = retry_after_s
        self.shed = Counter(
            "rljob_requests_shed",
            "requests refused with 503 because the service was at its limit",
            ["pool"],
            registry=registry,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PROBE_PATHS or _is_log_follow(scope):
            await self.app(scope, receive, send)
            return
        caller = await self._caller(scope, receive, send)
        if caller is False:
            return  # refused: the token lookups were at their limit
        if caller is None:
            await self._anonymous(scope, receive, send)
            return
        scope.setdefault("state", {})[CALLER_STATE] = caller
        mark_authenticated(scope)  # its connection no longer counts among those without a token
        if EVENT_STREAM_PATH.match(scope["path"]):
            await self._stream(caller, scope, receive, send)
        else:
            await self._team_request(caller, scope, receive, send)

    async def _caller(self, scope: Scope, receive: Receive, send: Send) -> Caller | None | Literal[False]:
        """The token's caller, None without a valid token, False when refused here (503 sent)."""
        header = _authorization(scope)
        serving = getattr(scope["app"].state, "serving", None) if "app" in scope else None
        if header is None or serving is None:
            return None
        try:
            cached: Caller | None = serving.tokens.cached_caller(header)
        except Unauthenticated:
            return None  # a malformed header
        if cached is not None:
            return cached
        pending = self._lookups_by_header.get(header)
        if pending is not None:  # a burst with one token (a dashboard opening its streams): one lookup
            return await asyncio.shield(pending)
        if self.lookups.in_flight >= self.lookups.limit:
            await self._refuse(self.lookups, scope, receive, send)
            return False
        self.lookups.in_flight += 1
        lookup = asyncio.ensure_future(self._lookup(serving.tokens, header))
        self._lookups_by_header[header] = lookup
        try:
            return await asyncio.shield(lookup)
        finally:
            self.lookups.in_flight -= 1
            self._lookups_by_header.pop(header, None)

    @staticmethod
    async def _lookup(tokens: Any, header: str) -> Caller | None:
        try:
            found: Caller = await run_in_threadpool(tokens.authenticate, header)
            return found
        except (Unauthenticated, StoreUnavailable):
            return None  # the route answers 401 (or 503 while the store is down) on its own

    async def _stream(self, caller: Caller, scope: Scope, receive: Receive, send: Send) -> None:
        def detail() -> str:
            return (
                f"this token already holds {self.limits.streams_per_token} event streams, its share; close one "
                f"or retry after {self.retry_after_s} s"
            )

        await self._within_share(
            self.streams_by_token,
            caller.token_id,
            self.limits.streams_per_token,
            "event streams of one token",
            detail,
            scope,
            receive,
            send,
            lambda: self._counted(self.streams, scope, receive, send),
        )

    async def _team_request(self, caller: Caller, scope: Scope, receive: Receive, send: Send) -> None:
        share = self.limits.requests_per_team

        def detail() -> str:
            return (
                f"team {caller.team} already has {share} requests in flight, its share of the service's "
                f"{self.requests.limit}; retry after {self.retry_after_s} s"
            )

        await self._within_share(
            self.requests_by_team,
            caller.team,
            share,
            "requests of one team",
            detail,
            scope,
            receive,
            send,
            lambda: self._counted(self.requests, scope, receive, send, bounded=True),
        )

    async def _within_share(
        self,
        tally: Tally[str],
        key: str,
        share: int,
        label: str,
        detail: Callable[[], str],
        scope: Scope,
        receive: Receive,
        send: Send,
        run: Callable[[], Awaitable[None]],
    ) -> None:
        """`run` while `key` holds fewer than `share` places in `tally`, else a 503 saying whose share is full (`detail`
        is written only then: this runs on every request)."""
        if tally[key] >= share:
            self.shed.labels(label).inc()
            await self._answer(503, detail(), scope, receive, send)
            return
        tally[key] += 1
        try:
            await run()
        finally:
            tally[key] -= 1
            if tally[key] <= 0:
                del tally[key]

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, once the body has arrived within body_timeout_s, answering within request_deadline_s. A request that
        declares no body has its one empty message already in (h11 ends such a message with its headers): taken at
        once, without a timer, since this runs on every request."""
        body = await self._read_body(receive, self.limits.body_timeout_s) if has_body(scope) else [await receive()]
        if isinstance(body, int):
            await self._answer(body, _BODY_REFUSED[body].format(self.limits.max_body_bytes), scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        deadline = asyncio.timeout(self.limits.request_deadline_s)
        try:
            async with deadline:
                await self.app(scope, _replay(body, receive), tracked)
        except TimeoutError:
            if not deadline.expired():
                raise  # the app's own
            self.shed.labels("requests past their deadline").inc()
            if not started:
                detail = (
                    f"the request was not answered within {self.limits.request_deadline_s:g} s; for a long log, "
                    "ask for tail_lines or follow=true"
                )
                await self._answer(503, detail, scope, receive, send)
            # else: the response is cut here, and the connection ends with it

    async def _anonymous(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.anonymous.in_flight >= self.anonymous.limit:
            await self._refuse(self.anonymous, scope, receive, send)
            return
        self.anonymous.in_flight += 1
        try:
            body = await self._read_body(receive, self.limits.anonymous_body_timeout_s)
            if isinstance(body, int):
                await self._answer(body, _BODY_REFUSED[body].format(self.limits.max_body_bytes), scope, receive, send)
                return
            await self.app(scope, _replay(body, receive), send)
        finally:
            self.anonymous.in_flight -= 1

    async def _read_body(self, receive: Receive, timeout_s: float) -> list[Message] | int:
        """The whole body, read within timeout_s; 408 when it is late, 413 when it is too large."""
        messages: list[Message] = []
        size = 0
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    message = await receive()
                    messages.append(message)
                    if message["type"] != "http.request":
                        return messages  # the client left: the app sees the disconnect
                    size += len(message.get("body", b""))
                    if size > self.limits.max_body_bytes:
                        return 413
                    if not message.get("more_body", False):
                        return messages
        except TimeoutError:
            return 408

    async def _counted(self, pool: Pool, scope: Scope, receive: Receive, send: Send, *, bounded: bool = False) -> None:
        if pool.in_flight >= pool.limit:
            await self._refuse(pool, scope, receive, send)
            return
        pool.in_flight += 1  # one event loop: no lock needed
        try:
            await (self._bounded(scope, receive, send) if bounded else self.app(scope, receive, send))
        finally:
            pool.in_flight -= 1

    async def _refuse(self, pool: Pool, scope: Scope, receive: Receive, send: Send) -> None:
        self.shed.labels(pool.name).inc()
        detail = f"the service is at its limit of {pool.limit} {pool.name} at once; retry after {self.retry_after_s} s"
        await self._answer(503, detail, scope, receive, send)

    async def _answer(self, status: int, detail: str, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {"Retry-After": str(self.retry_after_s)} if status == 503 else {}
        await JSONResponse({"detail": detail}, status_code=status, headers=headers)(scope, receive, send)


_BODY_REFUSED = {408: "the request body did not arrive in time", 413: "the request body is larger than {} bytes"}


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """The body already read, then the connection's own messages (a disconnect, for streams)."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
