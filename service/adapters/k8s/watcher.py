"""Watching, kopf-style: list, watch from the list's resourceVersion, re-list on 410 Gone; plus a
slow periodic reconcile so a missed event can only delay an observation, never lose it.

Watch events do not carry the whole story (a Job's status says nothing about an unschedulable pod),
so they only mark a job dirty; one reconciler thread re-observes dirty jobs and pushes an
Observation to the sink when it differs from the last one pushed. The sink is therefore called from
a single thread, in order, and only on change.

Each watch and the reconciler runs on a background loop of its own (service/background_loop.py),
all sharing the launcher's stop event; the launcher starts and stops them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypedDict, cast

import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from service.background_loop import BackgroundLoop
from service.domain.records.ports import Observation, ObservationSink, ObservedState

from . import names
from .serialize import to_plain

log = logging.getLogger(__name__)

FINAL_STATES = frozenset({ObservedState.SUCCEEDED, ObservedState.FAILED, ObservedState.GONE})


class _EventStream(Protocol):
    """What this module uses of kubernetes.watch.Watch, which ships without annotations."""

    def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]: ...

    def stop(self) -> None: ...


_new_watch = cast(Callable[[], _EventStream], watch.Watch)


def _job_id_of(raw: Any) -> str | None:
    if not isinstance(raw, dict):
        return None
    labels = (raw.get("metadata") or {}).get("labels") or {}
    if labels.get(names.LABEL_MANAGED_BY) != names.MANAGED_BY:
        return None  # a selector the server ignored, or someone else's object
    return labels.get(names.LABEL_JOB_ID)


def _list_result(result: Any) -> tuple[str | None, list[Any]]:
    """(resourceVersion, raw items) from a typed list (V1JobList) or a custom-object dict."""
    if isinstance(result, dict):
        return (result.get("metadata") or {}).get("resourceVersion"), list(result.get("items") or [])
    return result.metadata.resource_version, [to_plain(item) for item in result.items]


class WatchOptions(TypedDict):
    """The keyword arguments every ResourceWatch of one launcher shares."""

    on_job: Callable[[str], None]
    stop: threading.Event
    watch_timeout_s: int
    connect_timeout_s: float


class ResourceWatch:
    """List-then-watch loop for one resource kind; calls `on_job(job_id)` for every change it sees."""

    def __init__(
        self,
        kind: str,
        list_fn: Callable[..., Any],
        list_args: tuple[Any, ...],
        *,
        on_job: Callable[[str], None],
        stop: threading.Event,
        watch_timeout_s: int,
        connect_timeout_s: float,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
    ) -> None:
        self.kind, self._list_fn, self._list_args = kind, list_fn, list_args
        self._on_job, self._stop = on_job, stop
        self._watch_timeout_s, self._connect_timeout_s = watch_timeout_s, connect_timeout_s
        self._backoff_s, self._backoff_max_s = backoff_s, backoff_max_s
        self._watch: _EventStream | None = None
        self.lists = 0  # how many times it (re-)listed; tests read it
        self.gone_count = 0
        self._failures = 0  # in a row: the back-off grows with them
        self._version: str | None = None
        self._needs_list = True
        # A round blocks in its watch request; interrupt() cuts that short on stop.
        self.loop = BackgroundLoop(f"rljob-k8s-watch-{kind}", self.watch_round, interval_s=0, stop=stop, what="watch")

    def _kwargs(self) -> dict[str, Any]:
        return {"label_selector": names.MANAGED_SELECTOR}

    def relist(self) -> str | None:
        result = self._list_fn(*self._list_args, **self._kwargs(), _request_timeout=self._connect_timeout_s * 2)
        self.lists += 1
        version, items = _list_result(result)
        for raw in items:
            job_id = _job_id_of(raw)
            if job_id:
                self._on_job(job_id)
        return version

    def watch_once(self, version: str | None) -> str | None:
        """One watch request from `version`; returns the last resourceVersion seen. 410 propagates."""
        self._watch = w = _new_watch()
        # timeout_seconds bounds the watch server-side (and stops the client's own silent retry);
        # the read timeout bounds it client-side if the server never closes the stream.
        kwargs = dict(
            self._kwargs(),
            timeout_seconds=self._watch_timeout_s,
            _request_timeout=(self._connect_timeout_s, self._watch_timeout_s * 1.5 + 1),
        )
        if version:
            kwargs["resource_version"] = version
        try:
            for event in w.stream(self._list_fn, *self._list_args, **kwargs):
                raw = event.get("raw_object")
                if event.get("type") == "BOOKMARK":
                    version = ((raw or {}).get("metadata") or {}).get("resourceVersion") or version
                    continue
                version = ((raw or {}).get("metadata") or {}).get("resourceVersion") or version
                job_id = _job_id_of(raw)
                if job_id:
                    self._on_job(job_id)
                if self._stop.is_set():
                    break
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
            pass  # the stream went quiet or was cut: watch again from where we were
        finally:
            self._watch = None
        return version

    def watch_round(self) -> float:
        """List when needed, then watch once; returns the seconds to wait before the next round."""
        try:
            if self._needs_list:
                self._version = self.relist()
                self._needs_list = False
            self._version = self.watch_once(self._version)
            self._failures = 0
        except ApiException as exc:
            self._needs_list = True
            if exc.status == 410:
                # Our resourceVersion is older than the server keeps: state may have been missed,
                # so list again (which re-observes everything) and watch from the new version.
                self.gone_count += 1
                log.info("%s watch: 410 Gone, re-listing", self.kind)
                return 0.0
            return self._backoff(exc)
        except Exception as exc:  # noqa: BLE001 - a watcher must survive anything and retry
            self._needs_list = True
            return self._backoff(exc)
        return 0.0

    def _backoff(self, exc: Exception) -> float:
        self._failures += 1
        delay: float = min(self._backoff_max_s, self._backoff_s * 2.0 ** min(self._failures - 1, 10))
        status = getattr(exc, "status", None)
        if status == 404:
            # The resource is not served (JobSet CRD not installed): check back slowly.
            delay = self._backoff_max_s
        log.warning("%s watch failed (%s); retrying in %.1fs", self.kind, exc.__class__.__name__, delay)
        return delay

    def interrupt(self) -> None:
        w = self._watch
        if w is not None:
            w.stop()


class Reconciler:
    """Re-observes dirty jobs, and every known job each `interval_s`; pushes changes to the sink."""

    def __init__(
        self,
        observe: Callable[[str], Observation],
        sink: ObservationSink,
        *,
        interval_s: float,
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._observe, self._sink = observe, sink
        self._interval_s, self._stop, self._clock = interval_s, stop, clock
        self._lock = threading.Lock()
        self._dirty: dict[str, None] = {}  # insertion-ordered set
        self._known: set[str] = set()
        self._last: dict[str, tuple[Any, ...]] = {}
        self._next_sweep = clock() + interval_s
        # Waits at most 1 s between rounds, so a sweep falls due on time whatever the clock does.
        self.loop = BackgroundLoop("rljob-k8s-reconcile", self.reconcile_round, interval_s=1.0, stop=stop, what="reconcile")

    def mark(self, job_id: str) -> None:
        with self._lock:
            self._known.add(job_id)
            self._dirty[job_id] = None
        self.loop.wake()

    def remember(self, job_id: str) -> None:
        """Include a job in the periodic reconcile without observing it now."""
        with self._lock:
            self._known.add(job_id)

    def reconcile_round(self) -> float:
        """Re-observe the dirty jobs (every known one when a sweep is due); the seconds until the next round."""
        with self._lock:
            if self._clock() >= self._next_sweep:
                for job_id in sorted(self._known):
                    self._dirty[job_id] = None
                self._next_sweep = self._clock() + self._interval_s
            batch = list(self._dirty)
            self._dirty.clear()
        for job_id in batch:
            if self._stop.is_set():
                return 0.0
            self.reconcile(job_id)
        with self._lock:
            if self._dirty:
                return 0.0
        return max(0.0, min(self._next_sweep - self._clock(), 1.0))

    def reconcile(self, job_id: str) -> None:
        try:
            obs = self._observe(job_id)
        except Exception:
            log.exception("observing %s failed; the next sweep retries", job_id)
            return
        # The queue too: a queued job's place in line moves while its reason and message stay.
        signature = (obs.state, obs.reason, obs.message, obs.exit_code, obs.queue)
        if obs.state in FINAL_STATES:
            with self._lock:
                self._known.discard(job_id)  # nothing more to learn; a new event re-adds it
        if self._last.get(job_id) == signature:
            return
        self._last[job_id] = signature
        try:
            self._sink(obs)
        except Exception:
            log.exception("observation sink failed for %s", job_id)
