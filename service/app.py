"""The app factory. Nothing is built at import time: `create_app(settings)` builds the runtime
(service/runtime.py: the store, the launcher, the job service, leadership, the supervisor) in its
lifespan and starts it, then the API's serving parts over it (service/api/serving.py: the event
fan-out, views, log followers, metrics); it stops them in the other order when the app stops. `create_app_from_env()` is the same
with settings read from RLJOB_* variables: the service image's `uvicorn ... --factory` entrypoint calls a
factory with no arguments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.config import Settings
from service.domain.records.ports import Clock, JobLauncher, JobStore, ProgressSource, RunFiles, utc_now
from service.logging_config import configure_logging
from service.runtime import RuntimeOverrides, SelfCheck, build_runtime

from .api.body_limit import BodyLimitMiddleware
from .api.disconnect import CancelOnDisconnectMiddleware
from .api.errors import install_error_handlers
from .api.metrics import LatencyMiddleware, ServiceMetrics
from .api.openapi import install_openapi_refinements
from .api.overload import Limits, LoadSheddingMiddleware
from .api.routes import evals, events, health, job_diff, jobs, phases, usage, webhooks
from .api.serving import build_serving
from .api.status_shortcut import StatusReadShortcut
from .api.termination import on_termination_signal

MAX_TOKEN_LOOKUPS = 16  # tokens not remembered yet, looked up in the store at once (api/overload.py)


def create_app(
    settings: Settings,
    *,
    store: JobStore | None = None,
    launcher: JobLauncher | None = None,
    progress: ProgressSource | None = None,
    run_files: RunFiles | None = None,
    clock: Clock = utc_now,
    self_check: SelfCheck | None = None,
) -> FastAPI:
    """Build the ASGI app. Tests pass their own store/launcher/progress fakes at the ports (what each
    one means: RuntimeOverrides, service/runtime.py)."""
    metrics = ServiceMetrics()  # the middleware's, before any runtime exists; the runtime adds its gauges
    overrides = RuntimeOverrides(store=store, launcher=launcher, progress=progress, run_files=run_files, clock=clock, self_check=self_check)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = build_runtime(settings, overrides)
        await runtime.start()
        serving = build_serving(runtime, metrics)
        try:
            await serving.start(leads=lambda: runtime.leadership.leads)
        except BaseException:
            await serving.stop()
            await runtime.stop()
            raise
        app.state.runtime, app.state.serving = runtime, serving
        try:
            with on_termination_signal(serving.fanout.end_streams):
                yield
        finally:
            app.state.serving = None
            try:
                await serving.stop()
            finally:
                await runtime.stop()
                app.state.runtime = None

    app = FastAPI(
        title="rljob control service",
        version="1",
        description="Submit and watch GRPO post-training jobs. Authenticate with `Authorization: Bearer <token>`.",
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    app.state.runtime = None  # the domain side, for tests and the CLI's in-process uses
    app.state.serving = None  # what the routes read (service/api/deps.py)
    install_error_handlers(app)
    install_openapi_refinements(app)
    app.add_middleware(StatusReadShortcut)  # innermost: every middleware below sees the read it answers
    app.add_middleware(LatencyMiddleware, metrics=metrics)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(CancelOnDisconnectMiddleware)
    # Outermost of ours: a request refused for load costs as little as possible.
    app.add_middleware(
        LoadSheddingMiddleware,
        limits=Limits(
            requests=settings.max_requests_in_flight,
            requests_per_team=settings.max_requests_per_team,
            streams=settings.max_event_streams,
            streams_per_token=settings.max_event_streams_per_token,
            anonymous=settings.max_anonymous_requests,
            token_lookups=MAX_TOKEN_LOOKUPS,
            anonymous_body_timeout_s=settings.anonymous_body_timeout_s,
            body_timeout_s=settings.body_timeout_s,
            request_deadline_s=settings.request_deadline_s,
            max_body_bytes=settings.max_body_bytes,
        ),
        retry_after_s=settings.overload_retry_after_s,
        registry=metrics.registry,
    )
    app.include_router(health.router)
    app.include_router(job_diff.router)  # before jobs: /v1/jobs/diff is no job id
    app.include_router(jobs.router)
    app.include_router(events.router)
    app.include_router(phases.router)
    app.include_router(usage.router)
    app.include_router(evals.router)
    app.include_router(webhooks.router)
    _mount_dashboard(app)
    return app


def _mount_dashboard(app: FastAPI) -> None:
    try:
        from service.dashboard import mount_dashboard
    except ImportError:  # the dashboard is optional: the API works without it
        return
    mount_dashboard(app)


def create_app_from_env() -> FastAPI:
    """Zero-argument factory for `uvicorn service.app:create_app_from_env --factory` (docker/service.Dockerfile):
    settings from the environment the Deployment gives (ConfigMap, Secret), validated as `rljob serve` does.
    It configures the process's logging as `rljob serve` does: this is the container's entrypoint."""
    settings = Settings()
    configure_logging(
        secrets=[settings.bootstrap_token.get_secret_value()] if settings.bootstrap_token else [],
        access_log_reads_per_s=settings.access_log_reads_per_s,
    )
    return create_app(settings)
