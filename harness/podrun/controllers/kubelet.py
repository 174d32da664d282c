"""The scheduler and the kubelet of the emulated cluster's one node, driving PodRunners from API objects.

Scheduler: a pod without spec.nodeName is bound to the node when it fits (scheduling.py), else it gets
PodScheduled=False/Unschedulable and a FailedScheduling event, re-checked every second.
Kubelet: a bound pod gets a PodRunner; every status change is written back (PATCH pods/<name>), with
the conditions others own (PodScheduled, DisruptionTarget) kept; runner events become Event objects;
a pod with a deletionTimestamp (or gone) is terminated with its grace period; logs are served through
the pod log endpoint (`follow`, `tailLines`, `container` naming a regular or init container, `previous`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kmock._internal.rendering import Response

from harness.podrun.api.kapi import KApi, now_iso
from harness.podrun.pods.envvars import ApiAccess
from harness.podrun.pods.runner import PodRunner

from .scheduling import Node, unschedulable

RESCHEDULE_S = 1.0


def log_container(pod: dict[str, Any], name: str, asked: str | None) -> tuple[str, str | None]:
    """Which container's log: the one asked for, by name among regular and init containers, else the only
    regular one (kubernetes pkg/registry/core/pod/strategy.go LogLocation, the index's copy): (name, refusal)."""
    spec = pod["spec"]
    regular = [c["name"] for c in spec["containers"]]
    init = [c["name"] for c in spec.get("initContainers") or []]
    if asked:
        return (asked, None) if asked in (*regular, *init) else (asked, f"container {asked} is not valid for pod {name}")
    if len(regular) == 1:
        return regular[0], None
    refusal = f"a container name must be specified for pod {name}, choose one of: [{' '.join(regular)}]"
    if init:
        refusal += f" or one of the init containers: [{' '.join(init)}]"
    return "", refusal


def _bad_request(message: str) -> Any:
    return Response(
        status=400,
        payload={"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 400, "reason": "BadRequest", "message": message},
    )


def _key(pod: dict[str, Any]) -> tuple[str, str, str]:
    meta = pod["metadata"]
    return meta["namespace"], meta["name"], meta.get("uid", "")


class Kubelet:
    def __init__(
        self, api: KApi, work_dir: Path, node: Node, *, access: ApiAccess | None, restart_backoff_s: float, retry_s: float
    ) -> None:
        self.api, self.work_dir, self.node, self.access = api, work_dir, node, access
        self._restart_backoff_s, self._retry_s = restart_backoff_s, retry_s
        self.runners: dict[tuple[str, str, str], PodRunner] = {}
        self._dirty: set[tuple[str, str, str]] = set()
        self._conditions: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}  # owned by others
        self._unschedulable: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._grace: dict[tuple[str, str, str], float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.wake = asyncio.Event()

    # -- called by the cluster ------------------------------------------------------------------------

    def set_condition(self, pod: dict[str, Any], cond: dict[str, Any]) -> None:
        self._conditions.setdefault(_key(pod), {})[cond["type"]] = cond
        self._dirty.add(_key(pod))

    def set_grace(self, pod: dict[str, Any], grace_s: float) -> None:
        self._grace[_key(pod)] = grace_s

    def runner(self, namespace: str, name: str) -> PodRunner | None:
        return next((r for (ns, n, _), r in self.runners.items() if (ns, n) == (namespace, name)), None)

    def errors(self) -> list[BaseException]:
        return [e for r in self.runners.values() for e in r.errors]

    async def sync(self, pods: list[dict[str, Any]]) -> None:
        self._loop = asyncio.get_running_loop()
        present = {_key(p): p for p in pods}
        for key, gone in list(self.runners.items()):
            if key not in present:  # deleted without a finalizer holding it: stop and forget
                gone.terminate(self._grace.get(key))
                if gone.finished():
                    gone.cleanup()
                    del self.runners[key]
        bound = [p for p in pods if (p.get("spec") or {}).get("nodeName") == self.node.name]
        for pod in pods:
            if not (pod.get("spec") or {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                await self._schedule(pod, bound)
        for pod in bound:
            key = _key(pod)
            runner = self.runners.get(key)
            finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if runner is None and not finished:
                if pod["metadata"].get("deletionTimestamp"):
                    await self.api.patch("Pod", key[0], key[1], {"status": {"phase": "Failed"}})
                    continue
                runner = self._start(pod)
            if runner is not None and pod["metadata"].get("deletionTimestamp"):
                runner.terminate(self._grace.get(key, pod["metadata"].get("deletionGracePeriodSeconds")))
        for key in list(self._dirty):
            self._dirty.discard(key)
            await self._push(key, present.get(key))

    # -- internals ------------------------------------------------------------------------------------

    async def _schedule(self, pod: dict[str, Any], bound: list[dict[str, Any]]) -> None:
        key = _key(pod)
        last = self._unschedulable.get(key)
        if last and time.monotonic() - last[1] < RESCHEDULE_S:
            return
        running = [p["spec"] for p in bound if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        why = unschedulable(pod["spec"], self.node, running)
        ns, name, _ = key
        if why is None:
            self._unschedulable.pop(key, None)
            self.set_condition(pod, {"type": "PodScheduled", "status": "True"})
            await self.api.patch(
                "Pod",
                ns,
                name,
                {"spec": {"nodeName": self.node.name}, "status": {"phase": "Pending", "conditions": list(self._conditions[key].values())}},
            )
            await self.api.event(
                pod, "Pod", "Scheduled", f"Successfully assigned {ns}/{name} to {self.node.name}", component="default-scheduler"
            )
            return
        if last is None or last[0] != why:
            await self.api.event(pod, "Pod", "FailedScheduling", why, "Warning", component="default-scheduler")
        self._unschedulable[key] = (why, time.monotonic())
        # lastTransitionTime moves only when the status changes (kube-scheduler through pkg/api/v1/pod/util.go UpdatePodCondition).
        held = self._conditions.get(key, {}).get("PodScheduled") or {}
        since = held.get("lastTransitionTime") if held.get("status") == "False" else None
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}
        self.set_condition(pod, {**condition, "lastTransitionTime": since or now_iso()})
        self._dirty.discard(key)
        await self.api.patch("Pod", ns, name, {"status": {"phase": "Pending", "conditions": list(self._conditions[key].values())}})

    def _start(self, pod: dict[str, Any]) -> PodRunner:
        key = _key(pod)
        ns = key[0]

        def lookup(kind: str, name: str) -> dict[str, Any] | None:
            assert self._loop is not None  # read on the loop that owns kmock's store
            fut = asyncio.run_coroutine_threadsafe(self._get(kind, ns, name), self._loop)
            return fut.result(timeout=10)

        def changed() -> None:
            self._dirty.add(key)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self.wake.set)

        runner = PodRunner(
            pod,
            lookup=lookup,
            work_dir=self.work_dir / f"{ns}_{key[1]}_{key[2][:8]}",
            api=self.access,
            services=self.api.list("Service", ns),
            allocatable=self.node.allocatable,
            on_change=changed,
            restart_backoff_s=self._restart_backoff_s,
            retry_s=self._retry_s,
        )
        self.runners[key] = runner
        runner.start()
        return runner

    async def _get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        found = self.api.get(kind, ns, name)
        if found is None and (kind, name) == ("ServiceAccount", "default"):
            return {"metadata": {"name": "default"}}  # every namespace has one
        return found

    async def _push(self, key: tuple[str, str, str], pod: dict[str, Any] | None) -> None:
        runner = self.runners.get(key)
        if pod is None:
            return
        if runner is not None:
            for event in runner.drain_events():
                await self.api.event(pod, "Pod", event.reason, event.message, event.type, component="kubelet")
            status = runner.status()
        else:
            status = {"phase": (pod.get("status") or {}).get("phase", "Pending")}
        others = self._conditions.get(key, {})
        status["conditions"] = [c for c in status.get("conditions", []) if c["type"] not in others] + list(others.values())
        await self.api.patch("Pod", key[0], key[1], {"status": status})

    # -- the pod log endpoint ---------------------------------------------------------------------------

    def serve_log(self, request: Any) -> Any:
        runner = self.runner(request.namespace, request.name)
        params = request.params
        if runner is None:
            return Response(
                status=404,
                payload={
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": 404,
                    "reason": "NotFound",
                    "message": f'pods "{request.name}" not found',
                },
            )
        container, refused = log_container(runner.pod, request.name, params.get("container"))
        if refused is not None:
            return _bad_request(refused)
        path = runner.log_path(container, previous=params.get("previous") == "true")
        if path is None or not path.exists():
            status = runner.status()
            states = [
                c["state"] for c in [*status["containerStatuses"], *status.get("initContainerStatuses", [])] if c["name"] == container
            ]
            reason = (states[0].get("waiting") or {}).get("reason") or "ContainerCreating"
            return _bad_request(f'container "{container}" in pod "{request.name}" is waiting to start: {reason}')
        tail = int(params["tailLines"]) if params.get("tailLines") else None
        return Response(
            status=200,
            headers={"Content-Type": "text/plain"},
            payload=self._stream(runner, container, path, follow=params.get("follow") == "true", tail=tail),
        )

    async def _stream(self, runner: PodRunner, container: str, path: Path, *, follow: bool, tail: int | None) -> AsyncIterator[bytes]:
        yield b""  # kmock needs a first chunk to start the response, even for an empty log
        data = path.read_bytes()
        if tail is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail else b""
        position = path.stat().st_size
        if data:
            yield data
        while follow:
            await asyncio.sleep(0.1)
            size = path.stat().st_size if path.exists() else position
            if size > position:
                with path.open("rb") as f:
                    f.seek(position)
                    chunk = f.read(size - position)
                position = size
                yield chunk
            elif runner.log_path(container) != path or not runner.container_active(container):
                return
