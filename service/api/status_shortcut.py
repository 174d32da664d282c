"""The status read a dashboard polls, answered from the held view before the router (issue 68 §6).

`GET /v1/jobs/{id}` of a job whose record is held in memory (api/job_views.py: SQLite's shared records) and visible
to the caller the load shedder already authenticated is answered here with the very bytes and headers the route
would send: the view's JSON, `content-type: application/json`. Everything else (no held record, another team's job,
a malformed id, no token checked, any other method or path) goes on to the router unchanged, which answers it as
before, errors included. What this skips is per-request work the answer does not depend on: Starlette's routing over
every route, FastAPI's dependency solving and its request and response objects: about a third of the service's
event-loop samples in a profile of a running job's read at saturation (bench/control_plane/README.md).

It sits innermost of the service's middlewares, so the load shedder, the disconnect watch, the body limit and the
latency metrics see the read as they see any other; it names the route in the scope, as routing would (the route the
router matched for the first status read it answered: until then every read goes to the router), so the latency
histogram counts it under `/v1/jobs/{job_id}`.
"""

from __future__ import annotations

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from trainer.contract import JOB_ID_RE

from .overload import CALLER_STATE

STATUS_PREFIX = "/v1/jobs/"
STATUS_ROUTE = STATUS_PREFIX + "{job_id}"


class StatusReadShortcut:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._route: BaseRoute | None = None  # the status route, as the router matched it for a read it answered

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self._held(scope) if self._route is not None else None
        if body is None:
            await self.app(scope, receive, send)
            if self._route is None and scope["type"] == "http" and getattr(scope.get("route"), "path", None) == STATUS_ROUTE:
                self._route = scope["route"]
            return
        scope["route"] = self._route
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _held(self, scope: Scope) -> bytes | None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope.get("root_path"):
            return None
        path: str = scope["path"]
        job_id = path[len(STATUS_PREFIX) :] if path.startswith(STATUS_PREFIX) else ""
        caller = scope.get("state", {}).get(CALLER_STATE)
        serving = getattr(scope["app"].state, "serving", None) if "app" in scope else None
        if not JOB_ID_RE.match(job_id) or caller is None or serving is None:
            return None
        held: bytes | None = serving.views.held_json(caller, job_id)
        return held
