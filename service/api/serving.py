"""What the HTTP side serves from: the parts of a built Runtime the routes read, plus what only HTTP has
(the event fan-out every SSE stream reads from, the status views, the log followers' shares, the
metrics). The runtime (service/runtime.py) is the service's domain side and imports nothing from the
API; the app's lifespan (service/app.py) builds an `ApiServing` over a started runtime and stops it first.
Routes never see either whole: service/api/deps.py hands each route the one piece it declares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import anyio.to_thread

from service.config import Settings
from service.domain.job_service import JobService
from service.domain.records.models import JobPublic, JobRecord
from service.domain.records.ports import Clock, JobStore
from service.domain.self_check import CheckLine
from service.domain.tokens import TokenService
from service.domain.webhooks.webhook_models import WebhookQueue
from service.runtime import Runtime

from .event_fanout import EventFanout
from .job_views import JobViews
from .log_follow import LogFollowers
from .metrics import ServiceMetrics


@dataclass(frozen=True)
class ReadinessProbe:
    """What /readyz reads: the store's health, the start-up checks, and leadership's state."""

    store: JobStore
    checks: Callable[[], list[CheckLine] | None]
    not_ready_reason: Callable[[], str | None]
    role: Callable[[], str]


@dataclass
class ApiServing:
    settings: Settings
    clock: Clock
    store: JobStore
    jobs: JobService
    tokens: TokenService
    metrics: ServiceMetrics
    fanout: EventFanout  # the one reader of new job events, feeding every open event stream
    log_followers: LogFollowers
    views: JobViews  # the status read's and list page's JSON
    readiness: ReadinessProbe
    public_at: Callable[[JobRecord, datetime], JobPublic]
    webhooks: WebhookQueue | None = None  # the webhook deliveries admins read (None: a store without SQL)

    def public(self, record: JobRecord) -> JobPublic:
        """The job as the API shows it now: health by the configured thresholds, cost by the price table."""
        return self.public_at(record, self.clock())

    async def start(self, leads: Callable[[], bool]) -> None:
        self.metrics.watch_store(self.store.count_by_phase)
        await anyio.to_thread.run_sync(self.metrics.watch_usage, self.store, self.clock, self.settings.usage_prices_usd_per_chip_hour)
        self.metrics.watch_leadership(leads)
        await self.fanout.start()

    async def stop(self) -> None:
        """End every event stream and stop the fan-out's reader."""
        await self.fanout.stop()


def build_serving(runtime: Runtime, metrics: ServiceMetrics) -> ApiServing:
    """Nothing starts here: `ApiServing.start` does, after `Runtime.start`."""
    settings = runtime.settings
    return ApiServing(
        settings=settings,
        clock=runtime.clock,
        store=runtime.store,
        jobs=runtime.jobs,
        tokens=runtime.tokens,
        metrics=metrics,
        fanout=EventFanout(
            runtime.store, runtime.notifier, poll_interval_s=settings.sse_poll_interval_s, queue_size=settings.sse_queue_events
        ),
        log_followers=LogFollowers(settings.max_log_followers, settings.max_log_followers_per_team),
        views=JobViews(runtime.jobs, runtime.public_at, runtime.clock),
        readiness=ReadinessProbe(
            store=runtime.store,
            checks=runtime.self_checks.lines,
            not_ready_reason=runtime.not_ready_reason,
            role=lambda: runtime.leadership.role,
        ),
        public_at=runtime.public_at,
        webhooks=runtime.webhook_queue,
    )
