"""Prometheus counters of accelerator use, labelled {team, accelerator, capacity, phase}:

- rljob_chip_seconds_total: the slice's chips x seconds spent in the phase (0 for cpu jobs);
- rljob_job_seconds_total: seconds spent in the phase (what a cpu job shows);
- rljob_cost_usd_total {team, accelerator, capacity}: billed chip-seconds at the price table's rate.

A counter only counts what happened while this process ran: it starts from the jobs' usage when the
service starts (what an earlier process counted is not counted again; Prometheus reads a restart as a
counter reset). At each scrape it adds, for every job that is active or has changed phase since the
last scrape, the time since that job was last counted: a running job's counters grow as it runs, and
one that ended between two scrapes is counted up to its end.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from service.domain.cost.job_clock import phase_seconds
from service.domain.cost.placement import BILLED_PHASES
from service.domain.cost.usage import PriceTable, chips_of, family_of, job_capacity, price_of
from service.domain.records.models import JobRecord
from service.domain.records.ports import Clock, JobStore

EVENT_BATCH = 500
MAX_EVENT_BATCHES_PER_SCRAPE = 20  # bounds one scrape; events past it are read at the next scrape
_LABELS = ["team", "accelerator", "capacity", "phase"]
_BILLED = frozenset(phase.value for phase in BILLED_PHASES)


class UsageCounters(Collector):
    def __init__(self, store: JobStore, clock: Clock, prices: PriceTable) -> None:
        self._store, self._clock, self._prices = store, clock, prices
        self._lock = threading.Lock()
        self._job_seconds: dict[tuple[str, ...], float] = defaultdict(float)
        self._chip_seconds: dict[tuple[str, ...], float] = defaultdict(float)
        self._cost_usd: dict[tuple[str, ...], float] = defaultdict(float)
        # Job id -> phase seconds already counted, for every job not yet seen to end.
        self._counted: dict[str, dict[str, float]] = {}
        now = clock()
        self._after_seq = store.max_event_seq()
        for record in store.list_active():
            self._counted[record.id] = phase_seconds(record, now)

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self._lock:
            try:
                self._count_up()
            except Exception:  # noqa: BLE001 - a scrape during a database outage reports what was counted so far
                pass
            families = [
                CounterMetricFamily("rljob_chip_seconds", "TPU chip-seconds jobs spent, by phase", labels=_LABELS),
                CounterMetricFamily("rljob_job_seconds", "seconds jobs spent, by phase", labels=_LABELS),
                CounterMetricFamily(
                    "rljob_cost_usd",
                    "billed chip-seconds (running, cancelling) at the price table's rate",
                    labels=_LABELS[:3],
                ),
            ]
            for key, value in sorted(self._chip_seconds.items()):
                families[0].add_metric(list(key), value)
            for key, value in sorted(self._job_seconds.items()):
                families[1].add_metric(list(key), value)
            for key, value in sorted(self._cost_usd.items()):
                families[2].add_metric(list(key), value)
        yield from families

    def _changed_job_ids(self) -> tuple[set[str], int]:
        """Jobs whose phase changed since the last scrape (a job that ended among them), and the
        seq read up to: kept only once they are counted, so a scrape that fails reads them again."""
        changed: set[str] = set()
        after_seq = self._after_seq
        for _ in range(MAX_EVENT_BATCHES_PER_SCRAPE):
            events = self._store.events_after(after_seq, limit=EVENT_BATCH)
            for event in events:
                after_seq = event.seq
                if event.kind == "phase":
                    changed.add(event.job_id)
            if len(events) < EVENT_BATCH:
                break
        return changed, after_seq

    def _count_up(self) -> None:
        now = self._clock()
        changed, after_seq = self._changed_job_ids()
        records = {record.id: record for record in self._store.list_active()}
        for job_id in (changed | self._counted.keys()) - records.keys():
            record = self._store.get(job_id)
            if record is not None:
                records[job_id] = record
        for record in records.values():
            self._add(record, phase_seconds(record, now))
        self._after_seq = after_seq

    def _add(self, record: JobRecord, seconds: dict[str, float]) -> None:
        # Time since the last count goes to the kind the job is on now (a requeue onto another kind moves it on).
        accelerator, capacity = record.hardware.accelerator, job_capacity(record)
        chips = chips_of(accelerator)
        price = price_of(self._prices, family_of(accelerator), capacity)
        counted = self._counted.get(record.id, {})
        for phase, total_s in seconds.items():
            delta_s = total_s - counted.get(phase, 0.0)
            if delta_s <= 0:
                continue
            key = (record.team, accelerator, capacity, phase)
            self._job_seconds[key] += delta_s
            self._chip_seconds[key] += chips * delta_s
            if phase in _BILLED and price:
                self._cost_usd[key[:3]] += chips * delta_s / 3600 * price
        if record.phase.is_terminal():
            self._counted.pop(record.id, None)
        else:
            self._counted[record.id] = seconds
