"""The service's runtime: its domain side, built once (`build_runtime`) and started and stopped as one
(`Runtime.start`, `Runtime.stop`). It imports nothing from the HTTP side: the app's lifespan
(service/app.py) starts a built runtime and then the API's serving parts over it (service/api/serving.py:
the event fan-out, views, log followers, metrics); tests build one without ASGI.

`build_runtime(settings, overrides)` wires the store, the launcher (chosen once, adapters/launchers.py),
the leader lock (the LeaderLock port, chosen by the store: adapters/leader_locks.py), the job service,
the supervisor, leadership and, with RLJOB_MLFLOW_TRACKING_URI set, the live MLflow export
(adapters/mlflow_live.py, run by the leader only, like the supervisor). `RuntimeOverrides` carries
what tests put at the ports instead.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import anyio.to_thread

from service.adapters.checkpoint_deleter import RunCheckpointStore
from service.adapters.events_file import EventsFileReader
from service.adapters.launchers import build_launcher, startup_checks
from service.adapters.leader_locks import leader_lock_for
from service.adapters.mlflow_live import MlflowLiveExport
from service.adapters.run_files import StoreRunFiles
from service.adapters.store import SqlJobStore
from service.adapters.store.webhook_rows import SqlWebhookQueue
from service.adapters.webhook_sender import HttpWebhookTransport
from service.change_notifier import ChangeNotifier
from service.config import Settings
from service.domain.cost.budget_ledger import BudgetLedger
from service.domain.fold_pacer import FoldPacer
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPolicies, JobPorts, Pacing
from service.domain.job_writer import WriteRules
from service.domain.records.models import JobPublic, JobRecord
from service.domain.records.ports import Clock, JobLauncher, JobStore, ProgressSource, RunFiles, utc_now
from service.domain.self_check import CheckLine, SelfCheckReport
from service.domain.tokens import TokenCache, TokenService
from service.domain.views import to_public
from service.domain.webhooks.webhook_dispatch import DeliveryPolicy, WebhookDispatcher
from service.domain.webhooks.webhook_models import WebhookQueue, resolve_endpoints
from service.leadership import Leadership
from service.supervisor import Supervisor

log = logging.getLogger(__name__)

SHARED_RECORDS = 2048  # job records the API may keep in memory (adapters/store/shared_records.py)

SelfCheck = Callable[[], list[CheckLine]]


def replica_name() -> str:
    """Who holds a leadership term, as the leader_terms row shows it: host and process."""
    return f"{socket.gethostname()} pid {os.getpid()}"


@dataclass(frozen=True)
class RuntimeOverrides:
    """What tests put at the ports instead of what the settings choose (None: the settings' choice).

    `self_check`: the backend's start-up checks (`rljob doctor`'s, for the Kubernetes backend the runtime
    builds itself); run once in the background, logged, and shown in /readyz's `checks`. A test that
    passes its own launcher gets none unless it passes them too."""

    store: JobStore | None = None  # not closed by the runtime: its owner closes it
    launcher: JobLauncher | None = None
    progress: ProgressSource | None = None
    run_files: RunFiles | None = None
    clock: Clock = utc_now
    self_check: SelfCheck | None = None


@dataclass
class Runtime:
    """The store, the job service, tokens, leadership and the background work behind them."""

    settings: Settings
    store: JobStore
    jobs: JobService
    tokens: TokenService
    notifier: ChangeNotifier
    supervisor: Supervisor
    leadership: Leadership
    clock: Clock
    self_checks: SelfCheckReport = field(default_factory=SelfCheckReport)  # start-up checks (/readyz shows them)
    self_check: SelfCheck | None = None  # what fills self_checks, run once by start()
    owns_store: bool = True  # stop() closes the store (False: a store the caller passed in)
    mlflow_export: MlflowLiveExport | None = None  # RLJOB_MLFLOW_TRACKING_URI set: the leader's live export
    webhook_queue: WebhookQueue | None = None  # the webhook deliveries (a SQL store's); None: a store without SQL
    webhooks: WebhookDispatcher | None = None  # RLJOB_TEAM_WEBHOOKS set: the leader's webhook delivery

    async def start(self) -> None:
        """Migrate, ensure the bootstrap token, start the self-check and leadership (a leader starts its
        supervisor). If a step fails, what had started is stopped before the error
        is raised (a second `rljob serve` on one state directory: StateDirInUse)."""
        try:
            await anyio.to_thread.run_sync(self.store.migrate)
            bootstrap = self.settings.bootstrap_token
            if bootstrap is not None:
                await anyio.to_thread.run_sync(
                    lambda: self.tokens.ensure(
                        bootstrap.get_secret_value(), self.settings.bootstrap_team, admin=self.settings.bootstrap_admin
                    )
                )
            if self.self_check is not None:
                check = threading.Thread(
                    target=run_self_check, args=(self.self_check, self.self_checks), name="rljob-self-check", daemon=True
                )
                check.start()
            await anyio.to_thread.run_sync(self.leadership.start)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Give up the lead (stopping the supervisor, the launcher's watches and the status mirror, each
        join bounded), then close the store if this runtime opened it."""
        try:
            await anyio.to_thread.run_sync(self.leadership.stop)
        finally:
            if self.owns_store:
                self.store.close()

    def not_ready_reason(self) -> str | None:
        """Why this replica cannot take submissions yet: only a leader still re-attaching jobs cannot
        (a follower stores them and the leader hands them over)."""
        if not self.leadership.leads or self.supervisor.ready.is_set():
            return None
        error = self.supervisor.recovery_error
        return f"recovery failed: {error}" if error else "recovering jobs"

    def public(self, record: JobRecord) -> JobPublic:
        """The job as the API shows it now: health judged by the configured thresholds, cost by the price table."""
        return self.public_at(record, self.clock())

    def public_at(self, record: JobRecord, now: datetime) -> JobPublic:
        return to_public(record, now, self.jobs.health_policy, self.settings.usage_prices_usd_per_chip_hour)


def build_runtime(settings: Settings, overrides: RuntimeOverrides | None = None) -> Runtime:
    """Wire the runtime from settings; nothing starts and no database is read until `Runtime.start`."""
    given = overrides or RuntimeOverrides()
    clock = given.clock
    lock = leader_lock_for(getattr(given.store, "url", None) if given.store is not None else settings.effective_database_url)
    # Records kept in memory for reads only where this process writes every job (lock not shared).
    store = given.store or SqlJobStore(settings.effective_database_url, shared_reads=0 if lock.shared else SHARED_RECORDS)
    tokens = TokenService(store, clock, cache=TokenCache(settings.token_cache_size, settings.token_cache_ttl_s))
    launcher = given.launcher or build_launcher(settings)
    self_check = given.self_check
    if self_check is None and given.launcher is None:
        self_check = startup_checks(settings, launcher)
    notifier = ChangeNotifier()

    leadership = Leadership(
        lock,
        take_term=lambda: store.take_term(replica_name(), clock()),
        on_elected=lambda term: supervisor.start_term(term),
        on_deposed=lambda: supervisor.end_term(),
        check_interval_s=settings.leader_check_interval_s,
    )
    # The job service and the supervisor's rounds are built from the same ports and policies.
    ports = JobPorts(store, launcher, given.progress or EventsFileReader(), run_files=given.run_files or StoreRunFiles())
    policies = JobPolicies(
        max_resumes=settings.max_resumes,
        max_hung_restarts=settings.max_hung_restarts,
        health=settings.health_policy,
        location=settings.location_policy,
        budgets=BudgetLedger(store, settings.team_budgets, settings.usage_prices_usd_per_chip_hour),
        prices=settings.usage_prices_usd_per_chip_hour,
    )
    jobs = JobService(
        ports,
        policies,
        writes=WriteRules(
            leads=lambda: leadership.leads, on_fenced=lambda: leadership.fenced(), request_write_wait_s=settings.request_write_wait_s
        ),
        pacing=Pacing(
            mirror_every_steps=settings.status_mirror_every_steps,
            mirror_interval_s=settings.status_mirror_interval_s,
            fold_pacer=FoldPacer(settings.progress_fold_cpu_share),
        ),
        clock=clock,
        notify=notifier.notify,
    )
    mlflow_export = None
    if settings.mlflow_tracking_uri:
        mlflow_export = MlflowLiveExport(
            store,
            ports.run_files,
            lambda record: to_public(record, clock(), policies.health, settings.usage_prices_usd_per_chip_hour),
            tracking_uri=settings.mlflow_tracking_uri,
            experiment=settings.mlflow_experiment,
            interval_s=settings.mlflow_export_interval_s,
        )
    webhook_queue, webhooks = build_webhooks(settings, store, clock)
    supervisor = Supervisor(
        jobs,
        ports,
        policies,
        clock=clock,
        progress_poll_interval_s=settings.progress_poll_interval_s,
        active_jobs_reconcile_interval_s=settings.active_jobs_reconcile_interval_s,
        take_over_requests=lock.shared,
        budget_check_interval_s=settings.budget_check_interval_s,
        checkpoints=RunCheckpointStore(),
        checkpoint_retention_days=settings.checkpoint_retention_days,
        rounds=[*(mlflow_export.rounds() if mlflow_export else []), *(webhooks.rounds() if webhooks else [])],
    )
    return Runtime(
        settings=settings,
        store=store,
        jobs=jobs,
        tokens=tokens,
        notifier=notifier,
        supervisor=supervisor,
        leadership=leadership,
        clock=clock,
        self_check=self_check,
        owns_store=given.store is None,
        mlflow_export=mlflow_export,
        webhook_queue=webhook_queue,
        webhooks=webhooks,
    )


def build_webhooks(settings: Settings, store: JobStore, clock: Clock) -> tuple[WebhookQueue | None, WebhookDispatcher | None]:
    """The webhook queue on the store's database and, with RLJOB_TEAM_WEBHOOKS set, the leader's dispatcher."""
    engine = getattr(store, "engine", None)
    queue = SqlWebhookQueue(engine) if engine is not None else None
    if not settings.team_webhooks:
        return queue, None
    if queue is None:
        raise ValueError("RLJOB_TEAM_WEBHOOKS needs the SQL store (SQLite or PostgreSQL) to queue deliveries in")
    policy = DeliveryPolicy(
        connect_timeout_s=min(5.0, settings.webhook_timeout_s),
        read_timeout_s=settings.webhook_timeout_s,
        max_attempts=settings.webhook_max_attempts,
        retry_base_s=settings.webhook_retry_base_s,
    )
    endpoints = resolve_endpoints(settings.team_webhooks)
    dispatcher = WebhookDispatcher(
        store, queue, HttpWebhookTransport(), endpoints, policy=policy, clock=clock, enqueue_interval_s=settings.progress_poll_interval_s
    )
    return queue, dispatcher


def run_self_check(checks: SelfCheck, report: SelfCheckReport) -> None:
    """The start-up checks, logged once (a failure is logged, not fatal: see service/domain/self_check.py)."""
    try:
        lines = checks()
    except Exception as e:  # noqa: BLE001 - a broken check must not take the service down
        lines = [CheckLine("warn", "self-check", f"could not run: {e.__class__.__name__}: {e}", "run `rljob doctor`")]
    report.set(lines)
    for line in lines:
        level = {"ok": logging.INFO, "warn": logging.WARNING, "fail": logging.ERROR}[line.status]
        log.log(level, "self-check %s", line.render().replace("\n      ", " "))
