"""Liveness, readiness and Prometheus metrics; unauthenticated (they reveal no job data)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from service.domain.records.errors import StoreUnavailable

router = APIRouter(tags=["health"])


class Liveness(BaseModel):
    status: Literal["ok"]


class SelfCheckPublic(BaseModel):
    status: Literal["ok", "warn", "fail"]
    name: str
    message: str
    fix: str


class Readiness(BaseModel):
    ready: bool
    reason: str | None = Field(default=None, description="why not ready: starting, recovering jobs, database down")
    role: Literal["leader", "follower"] | None = Field(
        default=None,
        description="leader: this replica launches, watches and reconciles jobs; follower: it serves the API only",
    )
    checks: list[SelfCheckPublic] | None = Field(
        default=None,
        description="the backend's start-up checks (`rljob doctor`'s, Kubernetes backend only; absent until they "
        "finished). A failed check is shown and logged but does not make the replica unready: restarting it "
        "cannot fix the cluster",
    )


@router.get("/healthz", response_model=Liveness)
def healthz() -> dict[str, str]:
    """The process is up and serving HTTP."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "not ready yet (or any more); `reason` says why"}},
)
async def readyz(request: Request) -> JSONResponse:
    """Ready: the store answers and can be written and, on the leading replica, every job from before it took the lead has
    been re-attached. `role` says which replica leads."""
    serving = getattr(request.app.state, "serving", None)
    if serving is None:
        return _not_ready("starting")
    probe = serving.readiness
    try:
        await run_in_threadpool(probe.store.ping)
        await run_in_threadpool(probe.store.check_writable)
    except StoreUnavailable as e:
        return _not_ready(str(e))
    checks = probe.checks()
    detail = {"checks": [line.public() for line in checks]} if checks is not None else {}
    reason = probe.not_ready_reason()
    if reason is not None:
        return _not_ready(reason, detail)
    return JSONResponse({"ready": True, "role": probe.role(), **detail})


def _not_ready(reason: str, detail: dict[str, Any] | None = None) -> JSONResponse:
    body = Readiness(ready=False, reason=reason).model_dump(exclude={"checks"})
    return JSONResponse({**body, **(detail or {})}, status_code=503)


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
