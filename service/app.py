"""The app factory. Nothing is built at import time: `create_app(settings)` wires the store, the
launcher (chosen once, adapters/launchers.py), the job service and the supervisor in its lifespan.
`create_app_from_env()` is the same with settings read from RLJOB_* variables: the service image's
`uvicorn ... --factory` entrypoint calls a factory with no arguments.

Start-up order matters: migrate, ensure the bootstrap token, then take the lead if no other replica
holds it (service/leadership.py): the leader starts the launcher's watcher and re-attaches every
non-terminal job in the background; /readyz says false and submissions get 503 until that recovery has
finished, so no new job can race with an old one being resumed. A replica that does not lead serves
reads, streams and submissions (stored; the leader hands them over) and is ready at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from service.adapters.events_file import EventsFileReader
from service.adapters.launchers import build_launcher, startup_checks
from service.adapters.leader_locks import leader_lock_for
from service.adapters.run_files import StoreRunFiles
from service.adapters.store import SqlJobStore
from service.change_notifier import ChangeNotifier
from service.config import Settings
from service.domain.job_service import JobService
from service.domain.ports import Clock, JobLauncher, JobStore, ProgressSource, RunFiles, utc_now
from service.domain.self_check import CheckLine, SelfCheckReport
from service.domain.tokens import TokenCache, TokenService
from service.leadership import Leadership
from service.logging_config import configure_logging
from service.supervisor import Supervisor

from .api.body_limit import BodyLimitMiddleware
from .api.deps import Runtime
from .api.disconnect import CancelOnDisconnectMiddleware
from .api.errors import install_error_handlers
from .api.event_fanout import EventFanout
from .api.log_follow import LogFollowers
from .api.metrics import LatencyMiddleware, ServiceMetrics
from .api.openapi import install_openapi_refinements
from .api.overload import Limits, LoadSheddingMiddleware
from .api.routes import events, health, jobs, phases, usage
from .api.termination import on_termination_signal

log = logging.getLogger(__name__)


def replica_name() -> str:
    """Who holds a leadership term, as the leader_terms row shows it: host and process."""
    return f"{socket.gethostname()} pid {os.getpid()}"
MAX_TOKEN_LOOKUPS = 16  # tokens not remembered yet, looked up in the store at once (api/overload.py)
SHARED_RECORDS = 2048  # job records the API may keep in memory (adapters/store/shared_records.py)


def create_app(
    settings: Settings,
    *,
    store: JobStore | None = None,
    launcher: JobLauncher | None = None,
    progress: ProgressSource | None = None,
    run_files: RunFiles | None = None,
    clock: Clock = utc_now,
    self_check: Callable[[], list[CheckLine]] | None = None,
) -> FastAPI:
    """Build the ASGI app. Tests pass their own store/launcher/progress fakes at the ports.

    `self_check`: the backend's start-up checks (`rljob doctor`'s, for the Kubernetes backend the app
    builds itself); run once in the background, logged, and shown in /readyz's `checks`."""
    metrics = ServiceMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        lock = leader_lock_for(getattr(store, "url", None) if store is not None else settings.effective_database_url)
        # Records kept in memory for reads only where this process writes every job (lock not shared).
        job_store = store or SqlJobStore(settings.effective_database_url, shared_reads=0 if lock.shared else SHARED_RECORDS)
        await run_in_threadpool(job_store.migrate)
        tokens = TokenService(job_store, clock, cache=TokenCache(settings.token_cache_size, settings.token_cache_ttl_s))
        if settings.bootstrap_token is not None:
            await run_in_threadpool(
                tokens.ensure, settings.bootstrap_token.get_secret_value(), settings.bootstrap_team,
                admin=settings.bootstrap_admin,
            )  # fmt: skip
        job_launcher = launcher or build_launcher(settings)
        checks = self_check if self_check is not None or launcher is not None else startup_checks(settings, job_launcher)
        report = SelfCheckReport()
        notifier = ChangeNotifier()
        def elected(term: int) -> None:
            job_service.begin_term(term)
            supervisor.start()

        def deposed() -> None:
            job_service.end_term()  # first: a leader write still under way is refused from here on
            supervisor.stop()

        leadership = Leadership(
            lock, take_term=lambda: job_store.take_term(replica_name(), clock()), on_elected=elected, on_deposed=deposed,
            check_interval_s=settings.leader_check_interval_s,
        )  # fmt: skip
        job_service = JobService(
            job_store, job_launcher, progress or EventsFileReader(),
            clock=clock, notify=notifier.notify, max_resumes=settings.max_resumes,
            run_files=run_files or StoreRunFiles(), mirror_every_steps=settings.status_mirror_every_steps,
            mirror_interval_s=settings.status_mirror_interval_s, health_policy=settings.health_policy,
            location_policy=settings.location_policy, leads=lambda: leadership.leads, on_fenced=lambda: leadership.fenced(),
        )  # fmt: skip
        supervisor = Supervisor(
            job_service, job_launcher,
            progress_poll_interval_s=settings.progress_poll_interval_s,
            active_jobs_reconcile_interval_s=settings.active_jobs_reconcile_interval_s,
            take_over_requests=lock.shared,
        )  # fmt: skip
        metrics.watch_store(job_store.count_by_phase)
        await run_in_threadpool(metrics.watch_usage, job_store, clock, settings.usage_prices_usd_per_chip_hour)
        app.state.runtime = Runtime(
            settings=settings, store=job_store, jobs=job_service, tokens=tokens, notifier=notifier,
            supervisor=supervisor, leadership=leadership, metrics=metrics, clock=clock,
            log_followers=LogFollowers(settings.max_log_followers), self_checks=report,
        )  # fmt: skip
        if checks is not None:
            threading.Thread(target=_run_self_check, args=(checks, report), name="rljob-self-check", daemon=True).start()
        fanout = EventFanout(job_store, notifier, poll_interval_s=settings.sse_poll_interval_s, queue_size=settings.sse_queue_events)
        await fanout.start()
        app.state.event_fanout = fanout
        metrics.watch_leadership(lambda: leadership.leads)
        await run_in_threadpool(leadership.start)
        try:
            with on_termination_signal(fanout.end_streams):
                yield
        finally:
            await fanout.stop()
            app.state.event_fanout = None
            await run_in_threadpool(leadership.stop)
            app.state.runtime = None
            if store is None:
                job_store.close()

    app = FastAPI(
        title="rljob control service",
        version="1",
        description="Submit and watch GRPO post-training jobs. Authenticate with `Authorization: Bearer <token>`.",
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    app.state.runtime = None
    app.state.event_fanout = None
    install_error_handlers(app)
    install_openapi_refinements(app)
    app.add_middleware(LatencyMiddleware, metrics=metrics)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(CancelOnDisconnectMiddleware)
    # Outermost of ours: a request refused for load costs as little as possible.
    app.add_middleware(
        LoadSheddingMiddleware, limits=Limits(
            requests=settings.max_requests_in_flight, streams=settings.max_event_streams,
            streams_per_token=settings.max_event_streams_per_token, anonymous=settings.max_anonymous_requests,
            token_lookups=MAX_TOKEN_LOOKUPS, body_timeout_s=settings.anonymous_body_timeout_s,
            max_body_bytes=settings.max_body_bytes,
        ), retry_after_s=settings.overload_retry_after_s, registry=metrics.registry,
    )  # fmt: skip
    app.include_router(health.router)
    app.include_router(jobs.router)
    app.include_router(events.router)
    app.include_router(phases.router)
    app.include_router(usage.router)
    _mount_dashboard(app)
    return app


def _run_self_check(checks: Callable[[], list[CheckLine]], report: SelfCheckReport) -> None:
    """The start-up checks, logged once (a failure is logged, not fatal: see service/domain/self_check.py)."""
    try:
        lines = checks()
    except Exception as e:  # noqa: BLE001 - a broken check must not take the service down
        lines = [CheckLine("warn", "self-check", f"could not run: {e.__class__.__name__}: {e}", "run `rljob doctor`")]
    report.set(lines)
    for line in lines:
        level = {"ok": logging.INFO, "warn": logging.WARNING, "fail": logging.ERROR}[line.status]
        log.log(level, "self-check %s", line.render().replace("\n      ", " "))


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
    configure_logging(secrets=[settings.bootstrap_token.get_secret_value()] if settings.bootstrap_token else [])
    return create_app(settings)
