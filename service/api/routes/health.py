"""Liveness, readiness and Prometheus metrics; unauthenticated (they reveal no job data)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.domain.errors import StoreUnavailable

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up and serving HTTP."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Ready: the store answers and every job from before the last restart has been re-attached."""
    runtime = getattr(request.app.state, "runtime", None)
    if runtime is None:
        return JSONResponse({"ready": False, "reason": "starting"}, status_code=503)
    try:
        await run_in_threadpool(runtime.store.ping)
    except StoreUnavailable as e:
        return JSONResponse({"ready": False, "reason": str(e)}, status_code=503)
    supervisor = runtime.supervisor
    if not supervisor.ready.is_set():
        reason = f"recovery failed: {supervisor.recovery_error}" if supervisor.recovery_error else "recovering jobs"
        return JSONResponse({"ready": False, "reason": reason}, status_code=503)
    return JSONResponse({"ready": True})


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
