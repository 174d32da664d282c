"""A thin wrapper over the kubernetes client: retries, idempotent create, 404 -> None.

APIs, sleep and clock are injected (tests pass the real client pointed at kmock and a fake sleep).
Only transient errors are retried (429, 5xx, connection trouble), with bounded exponential
backoff; anything else is a real answer and goes straight back to the caller.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import urllib3
from kubernetes.client import BatchV1Api, CoreV1Api, CoreV1Event, CustomObjectsApi, V1DeleteOptions
from kubernetes.client.exceptions import ApiException

from service.adapters.log_lines import LineCutter

from . import names
from .errors import ApiUnavailable, K8sBackendError, WorkloadConflict
from .kueue import JOB_UID_LABEL, KUEUE_GROUP, KUEUE_LOCAL_QUEUES, KUEUE_VERSION, KUEUE_WORKLOADS, unreadable_reason
from .manifests import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

log = logging.getLogger(__name__)

T = TypeVar("T")
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
FOLLOW_READ_TIMEOUT_S = 6 * 3600.0
LOG_READ_BYTES = 64 * 1024
MERGE_PATCH = "application/merge-patch+json"  # works for built-ins and CRDs alike
VISIBILITY_PENDING_PATH = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{name}/pendingworkloads"


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        # status 0: the client could not even get an HTTP answer (TLS or connection setup).
        return exc.status in TRANSIENT_STATUS or exc.status == 0
    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def api_status(exc: BaseException) -> int | None:
    return exc.status if isinstance(exc, ApiException) else None


def is_missing_object(exc: BaseException) -> bool:
    """A 404 about an object of a served resource (a Status with reason NotFound), not about the URL.

    The API server answers a GET of a missing object with a JSON Status (reason NotFound, details
    naming the kind), but a GET under a group/version it does not serve with a plain "404 page not
    found": that tells "the LocalQueue does not exist" from "Kueue's API is not there".
    """
    if not isinstance(exc, ApiException) or exc.status != 404:
        return False
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return False
    return isinstance(body, dict) and body.get("kind") == "Status" and body.get("reason") == "NotFound"


def _labels_of(obj: Any) -> dict[str, str]:
    if isinstance(obj, dict):
        return obj.get("metadata", {}).get("labels") or {}
    return (obj.metadata.labels if obj.metadata else None) or {}


class K8sClient:
    def __init__(
        self,
        *,
        core: CoreV1Api,
        batch: BatchV1Api,
        custom: CustomObjectsApi,
        namespace: str,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        attempts: int = 5,
        backoff_s: float = 0.5,
        backoff_max_s: float = 10.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.core, self.batch, self.custom = core, batch, custom
        self.namespace = namespace
        self._sleep, self._clock = sleep, clock
        self._attempts, self._backoff_s, self._backoff_max_s = attempts, backoff_s, backoff_max_s
        self.request_timeout_s = request_timeout_s

    # -- the retry loop -------------------------------------------------------------------------

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call `fn`, retrying transient failures; raise ApiUnavailable when the budget is spent."""
        kwargs.setdefault("_request_timeout", self.request_timeout_s)
        started = self._clock()
        for attempt in range(1, self._attempts + 1):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if attempt == self._attempts:
                    raise ApiUnavailable(
                        f"{what}: the Kubernetes API kept failing ({exc.__class__.__name__}"
                        f"{f' {api_status(exc)}' if api_status(exc) else ''}) for "
                        f"{self._clock() - started:.0f}s over {attempt} attempts; check the API server and the "
                        "network between the service and the cluster"
                    ) from exc
                delay = min(self._backoff_max_s, self._backoff_s * 2 ** (attempt - 1))
                retry_after = _retry_after_s(exc)
                if retry_after is not None:
                    delay = min(self._backoff_max_s, max(delay, retry_after))
                log.warning("%s: transient %s (attempt %d), retrying in %.1fs", what, exc.__class__.__name__, attempt, delay)
                self._sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")

    def read(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """Like `call`, but a 404 means the object is gone: None."""
        try:
            return self.call(what, fn, *args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, what: str, job_id: str, create: Callable[..., T], read: Callable[..., T | None]) -> tuple[T, bool]:
        """Create idempotently; returns (object, created_now).

        Names are deterministic from the job id, so a 409 means our own earlier create landed
        (a retried create whose first response was lost, or a launch repeated after a restart):
        read it back and treat it as success, unless it belongs to another job.
        """
        try:
            return self.call(what, create), True
        except ApiException as exc:
            if exc.status != 409:
                raise
        existing = self.read(f"{what} (read back after 409)", read)
        if existing is None:
            raise K8sBackendError(f"{what}: the API said it exists (409) but reading it back found nothing; retry")
        owner = _labels_of(existing).get(names.LABEL_JOB_ID)
        if owner != job_id:
            raise WorkloadConflict(
                f"{what}: an object with that name exists but belongs to job {owner!r}, not {job_id!r}; delete it or pick another job id"
            )
        return existing, False

    # -- typed helpers ----------------------------------------------------------------------------

    def create_config_map(self, job_id: str, body: Any) -> tuple[Any, bool]:
        name = body.metadata.name
        return self.create(
            f"create ConfigMap {self.namespace}/{name}",
            job_id,
            functools.partial(self.core.create_namespaced_config_map, self.namespace, body),
            functools.partial(self.core.read_namespaced_config_map, name, self.namespace),
        )

    def create_job(self, job_id: str, body: Any) -> tuple[Any, bool]:
        name = body.metadata.name
        return self.create(
            f"create Job {self.namespace}/{name}",
            job_id,
            functools.partial(self.batch.create_namespaced_job, self.namespace, body),
            functools.partial(self.batch.read_namespaced_job, name, self.namespace),
        )

    def create_jobset(self, job_id: str, body: dict[str, Any]) -> tuple[Any, bool]:
        name = body["metadata"]["name"]
        return self.create(
            f"create JobSet {self.namespace}/{name}",
            job_id,
            functools.partial(
                self.custom.create_namespaced_custom_object,
                JOBSET_GROUP,
                JOBSET_VERSION,
                self.namespace,
                JOBSET_PLURAL,
                body,
            ),
            functools.partial(
                self.custom.get_namespaced_custom_object,
                JOBSET_GROUP,
                JOBSET_VERSION,
                self.namespace,
                JOBSET_PLURAL,
                name,
            ),
        )

    def get_job(self, name: str) -> Any | None:
        return self.read(f"read Job {self.namespace}/{name}", self.batch.read_namespaced_job, name, self.namespace)

    def get_jobset(self, name: str) -> dict[str, Any] | None:
        jobset = self.read(
            f"read JobSet {self.namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            JOBSET_GROUP,
            JOBSET_VERSION,
            self.namespace,
            JOBSET_PLURAL,
            name,
        )
        # Custom objects come back as untyped JSON (the client says `object`).
        return cast("dict[str, Any] | None", jobset)

    def list_pods(self, job_id: str) -> list[Any]:
        result = self.call(
            f"list pods of {job_id}", self.core.list_namespaced_pod, self.namespace, label_selector=names.job_selector(job_id)
        )
        # Filter again client-side: cheap, and correct even where a selector was not applied.
        return [p for p in result.items if _labels_of(p).get(names.LABEL_JOB_ID) == job_id]

    def list_events(self, object_names: set[str]) -> list[Any]:
        """Events about the given objects (pods, the Job), oldest first."""
        if not object_names:
            return []
        selector = f"involvedObject.name={next(iter(object_names))}" if len(object_names) == 1 else None
        result = self.call("list events", self.core.list_namespaced_event, self.namespace, field_selector=selector)
        events = [e for e in result.items if e.involved_object and e.involved_object.name in object_names]
        return sorted(events, key=_event_time)

    def kueue_workloads(self, job_uid: str) -> list[dict[str, Any]] | str:
        """The Kueue Workloads of the Job/JobSet with this uid; when they cannot be read, why (a
        sentence: the v1beta2 API not served, no RBAC, or the error)."""
        try:
            workloads = self.call(
                "list Kueue workloads",
                self.custom.list_namespaced_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                self.namespace,
                KUEUE_WORKLOADS,
                label_selector=f"{JOB_UID_LABEL}={job_uid}",
            )
        except (ApiException, K8sBackendError) as exc:
            # No Kueue v1beta2 API or no RBAC for it: the job is still reported as waiting for Kueue, and why.
            log.debug("cannot read Kueue workloads: %s", exc)
            return unreadable_reason(api_status(exc), f"{exc.__class__.__name__}: {exc}")
        return list(cast(dict[str, Any], workloads).get("items") or [])  # a custom object list: untyped JSON

    def get_local_queue(self, name: str) -> dict[str, Any]:
        """A Kueue LocalQueue of the namespace. Raises ApiException, 404 included: is_missing_object
        tells a missing LocalQueue from an API server that does not serve kueue.x-k8s.io/v1beta2."""
        queue = self.call(
            f"read LocalQueue {self.namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            KUEUE_GROUP,
            KUEUE_VERSION,
            self.namespace,
            KUEUE_LOCAL_QUEUES,
            name,
        )
        return cast(dict[str, Any], queue)  # a custom object: untyped JSON

    def secret_keys(self, name: str) -> set[str] | None:
        """The keys of a Secret of the namespace (never its values); None when it does not exist."""
        secret = self.read(f"read Secret {self.namespace}/{name}", self.core.read_namespaced_secret, name, self.namespace)
        if secret is None:
            return None
        return set(secret.data or {}) | set(secret.string_data or {})

    def kueue_pending_workloads(self, local_queue: str) -> dict[str, Any] | None:
        """Kueue's visibility API for a LocalQueue (PendingWorkloadsSummary); None when not served or
        not allowed (the place in line is then unknown, nothing else changes)."""
        try:
            # One try, no retries: the place in line is a nicety, and an unavailable visibility server
            # (503 from its APIService) must not hold up observing every queued job for a backoff.
            return self._get_pending_workloads(local_queue, _request_timeout=self.request_timeout_s)
        except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            log.debug("cannot read Kueue's pending workloads of %s: %s", local_queue, exc)
            return None

    def _get_pending_workloads(self, local_queue: str, **kwargs: Any) -> dict[str, Any]:
        # The visibility API is an aggregated API, not a CRD: CustomObjectsApi has no call for a
        # subresource of it, so build the request the way the generated methods do (the RBAC scan in
        # tests/deploy reads the path from param_serialize below).
        api = self.custom.api_client
        request = api.param_serialize(
            method="GET",
            resource_path=VISIBILITY_PENDING_PATH,
            path_params={"namespace": self.namespace, "name": local_queue},
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = api.call_api(*request, _request_timeout=kwargs.get("_request_timeout"))
        response.read()
        data = api.response_deserialize(response, {"200": "object"}).data
        if not isinstance(data, dict):
            raise ValueError(f"pending workloads of {local_queue}: expected an object, got {type(data).__name__}")
        return cast(dict[str, Any], data)

    def delete(self, kind: str, name: str, *, propagation: str = "Foreground") -> bool:
        """Delete with propagation so pods go too; False when it was already gone."""
        body = V1DeleteOptions(propagation_policy=propagation)
        what = f"delete {kind} {self.namespace}/{name}"
        try:
            if kind == "Job":
                self.call(what, self.batch.delete_namespaced_job, name, self.namespace, body=body)
            elif kind == "JobSet":
                self.call(
                    what,
                    self.custom.delete_namespaced_custom_object,
                    JOBSET_GROUP,
                    JOBSET_VERSION,
                    self.namespace,
                    JOBSET_PLURAL,
                    name,
                    body=body,
                )
            elif kind == "ConfigMap":
                self.call(what, self.core.delete_namespaced_config_map, name, self.namespace, body=body)
            else:
                raise ValueError(f"cannot delete kind {kind}")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def patch_metadata(self, kind: str, name: str, metadata: dict[str, Any]) -> bool:
        """Merge-patch labels/annotations; False when the object is gone."""
        body = {"metadata": metadata}
        what = f"patch {kind} {self.namespace}/{name}"
        patched: object | None
        if kind == "Job":
            patched = self.read(what, self.batch.patch_namespaced_job, name, self.namespace, body, _content_type=MERGE_PATCH)
        elif kind == "JobSet":
            patched = self.read(
                what,
                self.custom.patch_namespaced_custom_object,
                JOBSET_GROUP,
                JOBSET_VERSION,
                self.namespace,
                JOBSET_PLURAL,
                name,
                body,
                _content_type=MERGE_PATCH,
            )
        elif kind == "ConfigMap":
            patched = self.read(what, self.core.patch_namespaced_config_map, name, self.namespace, body, _content_type=MERGE_PATCH)
        else:
            raise ValueError(f"cannot patch kind {kind}")
        return patched is not None

    def pod_log_lines(self, pod: str, *, follow: bool, tail_lines: int | None) -> Iterator[str | None]:
        """Lines of the trainer container's log, each cut to log_lines.MAX_LINE_BYTES; with follow, until the
        container ends, and None after each piece the API server sent (what arrived is all given; the next
        read waits on the trainer), so a reader can hand over what it has before it blocks."""
        kwargs: dict[str, Any] = {"container": names.TRAINER_CONTAINER, "follow": follow, "_preload_content": False}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if follow:
            # A long read timeout while following: a quiet trainer (an XLA compile) is not an error,
            # but a stream can still not hang forever on a dead connection.
            kwargs["_request_timeout"] = (self.request_timeout_s, FOLLOW_READ_TIMEOUT_S)
        log_read = self.read(f"read log of pod {pod}", self.core.read_namespaced_pod_log, pod, self.namespace, **kwargs)
        if log_read is None:
            return
        # The client declares `str`, true only when the body is preloaded; with _preload_content=False it
        # returns the open urllib3 response.
        resp = cast(urllib3.BaseHTTPResponse, log_read)
        try:
            yield from _cut_lines(resp, follow=follow)
        finally:
            resp.release_conn()


def _cut_lines(resp: urllib3.BaseHTTPResponse, *, follow: bool) -> Iterator[str | None]:
    """The response's lines read in pieces of at most LOG_READ_BYTES (a pod's log is what team code printed: one
    512 MiB line must not become 512 MiB here), and a last line without its newline."""
    cutter = LineCutter()
    for piece in resp.stream(amt=LOG_READ_BYTES, decode_content=False):
        yield from cutter.feed(piece)
        if follow:
            yield None
    if (rest := cutter.rest()) is not None:
        yield rest


def _retry_after_s(exc: BaseException) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _event_time(event: CoreV1Event) -> float:
    for stamp in (event.last_timestamp, event.event_time, event.first_timestamp, event.metadata.creation_timestamp):
        if stamp is not None:
            return stamp.timestamp()
    return 0.0
