"""Prometheus metrics: one registry per app (so tests can build many apps), a latency middleware
labelled by route template (not raw path: ids would explode the label space), a collector that
counts jobs by phase from the store at scrape time, and the usage counters (usage_metrics.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.domain.cost.usage import PriceTable
from service.domain.records.phases import JobPhase
from service.domain.records.ports import Clock, JobStore

from .usage_metrics import UsageCounters


class _JobsByPhase(Collector):
    def __init__(self, count_by_phase: Callable[[], dict[str, int]]) -> None:
        self._count = count_by_phase

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("rljob_jobs", "jobs in the store by phase", labels=["phase"])
        try:
            counts = self._count()
        except Exception:  # noqa: BLE001 - a scrape during a database outage reports nothing rather than failing
            counts = None
        if counts is not None:
            for phase in JobPhase:
                gauge.add_metric([phase.value], counts.get(phase.value, 0))
        yield gauge


class _Leader(Collector):
    def __init__(self, leads: Callable[[], bool]) -> None:
        self._leads = leads

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "rljob_leader",
            "1 on the replica that launches, watches and reconciles jobs, 0 on the others",
            value=1 if self._leads() else 0,
        )


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.submissions = Counter("rljob_job_submissions", "job submissions by outcome", ["outcome"], registry=self.registry)
        self.latency = Histogram(
            "rljob_api_request_duration_seconds",
            "API latency until the response starts",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self._phase_collector: _JobsByPhase | None = None
        self._usage_collector: UsageCounters | None = None
        self._leader_collector: _Leader | None = None

    def watch_store(self, count_by_phase: Callable[[], dict[str, int]]) -> None:
        if self._phase_collector is not None:
            self.registry.unregister(self._phase_collector)
        self._phase_collector = _JobsByPhase(count_by_phase)
        self.registry.register(self._phase_collector)

    def watch_leadership(self, leads: Callable[[], bool]) -> None:
        if self._leader_collector is not None:
            self.registry.unregister(self._leader_collector)
        self._leader_collector = _Leader(leads)
        self.registry.register(self._leader_collector)

    def watch_usage(self, store: JobStore, clock: Clock, prices: PriceTable) -> None:
        """Count chip-seconds from now on (reads the store: call it off the event loop)."""
        if self._usage_collector is not None:
            self.registry.unregister(self._usage_collector)
        self._usage_collector = UsageCounters(store, clock, prices)
        self.registry.register(self._usage_collector)


class LatencyMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware) so streaming responses are not buffered."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                route = scope.get("route")
                path = getattr(route, "path", None) or "unmatched"
                self.metrics.latency.labels(scope["method"], path, str(status["code"])).observe(time.perf_counter() - start)
            await send(message)

        await self.app(scope, receive, send_wrapper)
