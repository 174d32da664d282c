"""Reading a team's Kueue queue chain (LocalQueue -> ClusterQueue -> ResourceFlavors), with a short cache.

Three outcomes, kept apart because they lead to different actions:
- a chain (the flavors a job can be checked against);
- a problem Kueue itself would keep a job waiting forever for (the LocalQueue or ClusterQueue does not
  exist, or the ClusterQueue is inactive): the submit check refuses the job with it;
- unreadable (kueue.x-k8s.io/v1beta2 not served, RBAC forbids, the API server is unreachable): we cannot
  tell, so the job is NOT refused; the launcher logs it once and `rljob doctor` reports it. Refusing
  every job because an optional read failed would turn a missing ClusterRole into an outage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.client.exceptions import ApiException

from service.adapters.k8s.accelerators import TPU_RESOURCE
from service.adapters.k8s.client import K8sClient, api_status, is_missing_object
from service.adapters.k8s.errors import K8sBackendError
from service.adapters.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION
from service.adapters.k8s.kueue_setup import QueueChain, ResourceGroup, group_quotas, inactive_reason, make_flavor

from .reads import ClusterReads

KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
CLUSTER_QUEUES, RESOURCE_FLAVORS, ADMISSION_CHECKS = "clusterqueues", "resourceflavors", "admissionchecks"
CHAIN_CACHE_S = 30.0  # a burst of submissions reads the chain once; a fixed queue is seen within this


@dataclass(frozen=True)
class ChainRead:
    chain: QueueChain | None = None
    problem: str = ""  # the chain is broken: what Kueue would wait on forever, and what to do
    unreadable: str = ""  # we cannot tell: why
    cluster_queue: dict[str, Any] | None = None  # the ClusterQueue as read (the doctor looks at its checks)


class _Unreadable(Exception):
    pass


class _Missing(Exception):
    pass


def _why_unreadable(what: str, exc: BaseException) -> str:
    status = api_status(exc)
    if status == 404:
        return f"{what}: the {KUEUE_API} API is not served (Kueue missing or older than 0.15; install >= 0.15)"
    if status == 403:
        return f"{what}: forbidden by RBAC for the service's account ({getattr(exc, 'reason', '')})"
    return f"{what}: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _get(what: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except ApiException as exc:
        if is_missing_object(exc):
            raise _Missing(what) from exc
        raise _Unreadable(_why_unreadable(what, exc)) from exc
    except (K8sBackendError, OSError) as exc:
        raise _Unreadable(_why_unreadable(what, exc)) from exc


def read_chain(client: K8sClient, reads: ClusterReads, local_queue: str) -> ChainRead:
    ns = client.namespace
    try:
        lq = _get(f"read LocalQueue {ns}/{local_queue}", lambda: client.get_local_queue(local_queue))
    except _Missing:
        return ChainRead(
            problem=(
                f"Kueue LocalQueue {local_queue} does not exist in namespace {ns}, so Kueue would never admit the job; "
                "an admin creates it (k8s/kueue/localqueue.yaml) or fixes RLJOB_K8S_KUEUE_TEAM_QUEUES / RLJOB_K8S_KUEUE_QUEUE"
            )
        )
    except _Unreadable as exc:
        return ChainRead(unreadable=str(exc))
    cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
    try:
        cq = _get(f"read ClusterQueue {cq_name}", lambda: reads.kueue_object(CLUSTER_QUEUES, cq_name))
    except _Missing:
        return ChainRead(
            problem=(
                f"ClusterQueue {cq_name!r} of LocalQueue {local_queue} does not exist, so Kueue would never admit the job; "
                "an admin creates it (k8s/kueue/clusterqueue.yaml) or points the LocalQueue at an existing one"
            )
        )
    except _Unreadable as exc:
        return ChainRead(unreadable=str(exc))
    inactive = inactive_reason(cq)
    if inactive is not None:
        return ChainRead(
            problem=(
                f"ClusterQueue {cq_name} (of LocalQueue {local_queue}) is inactive, Kueue says {inactive}; nothing is "
                f"admitted until an admin fixes it (kubectl describe clusterqueue {cq_name})"
            ),
            cluster_queue=cq,
        )
    read_flavors: dict[str, dict[str, Any] | None] = {}  # name -> ResourceFlavor (None: no such object)
    groups = []
    for covered, group_flavors in group_quotas(cq):
        flavors, missing = [], []
        for name, quotas in group_flavors:
            if name not in read_flavors:
                try:
                    read_flavors[name] = _get(f"read ResourceFlavor {name}", lambda name=name: reads.kueue_object(RESOURCE_FLAVORS, name))  # type: ignore[misc]
                except _Missing:
                    read_flavors[name] = None
                except _Unreadable as exc:
                    return ChainRead(unreadable=str(exc))
            rf = read_flavors[name]
            if rf is None:
                missing.append(name)
            else:
                flavors.append(make_flavor(name, quotas.get(TPU_RESOURCE, Decimal(0)), rf, quotas))
        groups.append(ResourceGroup(covered, flavors, missing))
    tpu_group = next((g for g in groups if TPU_RESOURCE in g.covered), None)
    shown = [tpu_group] if tpu_group is not None else groups  # the doctor's flavors: the TPU group's, or every group's
    chain = QueueChain(
        local_queue,
        cq_name,
        [f for g in shown for f in g.flavors],
        tpu_group is not None,
        [n for g in groups for n in g.missing_flavors],
        groups,
    )
    return ChainRead(chain=chain, cluster_queue=cq)


class ChainCache:
    """read_chain results per LocalQueue for `ttl_s`; safe to share between request threads.

    Two threads missing the cache at once may both read: harmless, and simpler than per-key locks.
    """

    def __init__(
        self, read: Callable[[str], ChainRead], *, ttl_s: float = CHAIN_CACHE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._read, self._ttl_s, self._clock = read, ttl_s, clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, ChainRead]] = {}

    def get(self, local_queue: str) -> ChainRead:
        now = self._clock()
        with self._lock:
            hit = self._entries.get(local_queue)
        if hit is not None and now < hit[0]:
            return hit[1]
        result = self._read(local_queue)
        with self._lock:
            self._entries[local_queue] = (self._clock() + self._ttl_s, result)
        return result
