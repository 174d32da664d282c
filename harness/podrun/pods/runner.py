"""PodRunner: what the kubelet does for one pod, with local processes (see harness/podrun/__init__.py).

Volumes first (a failure leaves the pod Pending with a FailedMount event, retried), then the init
containers one at a time in their order, then the regular containers together; each container's attempts
and restarts are a ContainerLoop (container_loop.py). The order follows kubernetes
pkg/kubelet/kuberuntime/kuberuntime_container.go computeInitContainerActions at fbba6b47:
- a plain init container must exit 0 before the next one starts; one that fails is restarted unless the
  pod's restartPolicy is Never, in which case the pod fails (KillPod: the sidecars already running are
  stopped, the regular containers never start);
- a sidecar (an init container with restartPolicy Always) lets the next one start once it is running and
  started (its startupProbe, if it has one, succeeded; only httpGet probes are emulated, probes.py), and
  keeps running and being restarted beside the regular containers.
Once every regular container has ended for good (restartPolicy Never, or OnFailure after exit 0),
kuberuntime_manager.go computePodActions at 000f2605 kills the pod: the sidecars are no longer restarted
and are stopped in reverse order of declaration, each SIGTERM then SIGKILL after the grace period
(termination.py); their exit codes do not count in the pod's phase (status.py).
Deletion stops every running container with the same ordering: regular ones at once, sidecars after them.
emptyDir sizeLimit is watched as the kubelet's eviction manager does. The status is built in the API's shape.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .container_loop import ContainerLoop, PodContext, PodEvent, now_iso
from .envvars import POD_IP, ApiAccess, Lookup
from .status import ContainerState, pod_status
from .termination import is_sidecar, stop_in_order, turns
from .volumes import MountFailure, NotEmulated, materialize, remove_scratch, with_token_volume

__all__ = ["PodEvent", "PodRunner"]
WATCH_S = 0.05


class PodRunner:
    def __init__(
        self,
        pod: dict[str, Any],
        *,
        lookup: Lookup,
        work_dir: Path,
        api: ApiAccess | None = None,
        services: list[dict[str, Any]] | None = None,
        allocatable: dict[str, str] | None = None,
        venv: Path | None = None,
        on_change: Callable[[], None] = lambda: None,
        restart_backoff_s: float = 1.0,
        retry_s: float = 1.0,
    ) -> None:
        self._pod_in, self.work_dir = pod, work_dir
        self.pod = pod
        spec = pod.get("spec") or {}
        if spec.get("ephemeralContainers"):
            raise NotEmulated("ephemeralContainers are not run by the pod runner")
        self.restart_policy = spec.get("restartPolicy", "Always")
        self.grace_s = float(spec.get("terminationGracePeriodSeconds", 30))
        self._ctx = PodContext(
            pod=pod,
            lookup=lookup,
            work_dir=work_dir,
            api=api,
            services=services or [],
            allocatable=allocatable or {"cpu": "2", "memory": "8Gi"},
            on_change=on_change,
            restart_policy=self.restart_policy,
            grace_s=self.grace_s,
            backoff_s=restart_backoff_s,
            retry_s=retry_s,
            venv=venv or Path(sys.prefix),
        )
        self._lock = self._ctx.lock
        self._ports = self._ctx.ports
        init_specs = spec.get("initContainers") or []
        # convertToAPIContainerStatuses: with init containers, what has not started waits "PodInitializing"
        waiting = {"waiting": {"reason": "PodInitializing" if init_specs else "ContainerCreating"}}
        self._init = [
            ContainerLoop(c, ContainerState(c["name"], c["image"], "sidecar" if is_sidecar(c) else "init", state=dict(waiting)), self._ctx)
            for c in init_specs
        ]
        self._regular = [
            ContainerLoop(c, ContainerState(c["name"], c["image"], state=dict(waiting)), self._ctx) for c in spec["containers"]
        ]
        self._loops = {loop.name: loop for loop in [*self._init, *self._regular]}
        self._stop = threading.Event()
        self._terminating = False
        self._sidecars_stopping = False
        self._conditions: dict[str, str] = {}  # kubelet-owned condition type -> "True"/"False"
        self._evicted: tuple[str, str] | None = None
        self.start_time: str | None = None
        self._errors: list[BaseException] = []

    @property
    def errors(self) -> list[BaseException]:
        """What the runner could not emulate: the caller raises these."""
        return [*self._errors, *(e for loop in self._loops.values() for e in loop.errors)]

    # -- reading --------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            return pod_status(
                [loop.state for loop in self._init],
                [loop.state for loop in self._regular],
                restart_policy=self.restart_policy,
                kubelet_conditions=dict(self._conditions),
                start_time=self.start_time,
                terminating=self._terminating,
                evicted=self._evicted,
                pod_ip=POD_IP,
            )

    def drain_events(self) -> list[PodEvent]:
        with self._lock:
            out, self._ctx.events = self._ctx.events, []
            return out

    def finished(self) -> bool:
        with self._lock:
            return all(loop.state.done for loop in self._loops.values())

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.finished():
                return True
            time.sleep(0.05)
        return self.finished()

    def volume_host_path(self, volume: str) -> Path | None:
        """Where a materialized volume lives on this machine (None before the volumes are set up)."""
        with self._lock:
            found = self._ctx.volumes.get(volume)
        return None if found is None else found.host

    def log_path(self, container: str, *, previous: bool = False) -> Path | None:
        if container not in self._loops:
            return None
        with self._lock:
            attempt = self._loops[container].state.restarts - (1 if previous else 0)
        path = self.work_dir / "logs" / container / f"{attempt}.log"
        return path if attempt >= 0 else None

    def container_env(self, container: str) -> dict[str, str]:
        """The environment the container's latest attempt started with."""
        with self._lock:
            return dict(self._loops[container].env)

    def container_active(self, container: str) -> bool:
        """Running, or not finished for good (it may still start or restart): its log may still grow."""
        with self._lock:
            state = self._loops[container].state
            return state.running or not state.done

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._guarded, name=f"pod-{self._pod_in['metadata']['name']}", daemon=True).start()

    def terminate(self, grace_s: float | None = None) -> None:
        """Pod deletion: no more starts or restarts; every running container stopped, sidecars last."""
        grace = self.grace_s if grace_s is None else grace_s
        with self._lock:
            if self._terminating:
                return
            self._terminating = True
        self._stop.set()
        self._stop_containers(list(self._loops.values()), grace)
        self._ctx.on_change()

    def evict_for_storage(self, volume: str, limit: str) -> None:
        with self._lock:
            self._evicted = ("Evicted", f'Usage of EmptyDir volume "{volume}" exceeds the limit "{limit}". ')
        self._ctx.event("Evicted", self._evicted[1], "Warning")
        self.terminate(grace_s=0)

    def cleanup(self) -> None:
        remove_scratch(self._ctx.volumes)

    # -- internals ------------------------------------------------------------------------------------

    def _guarded(self) -> None:
        try:
            self._run_pod()
        except BaseException as e:  # noqa: BLE001 - surfaced to the caller through .errors
            self._errors.append(e)
            self._ctx.on_change()

    def _stop_containers(self, loops: list[ContainerLoop], grace_s: float) -> None:
        for loop in loops:
            loop.halt()
        with self._lock:  # an attempt starts under this lock: after it, a loop has either started or seen halt()
            running = {loop.name: loop for loop in loops if loop.running()}
        stop_in_order(
            running,
            self._loops,
            turns(self.pod["spec"]),
            grace_s,
            lambda name: self._ctx.event("Killing", f"Stopping container {name}"),
        )

    def _give_up_unstarted(self) -> None:
        """Containers that will never start (the pod ended first) are done as they are."""
        with self._lock:
            for loop in self._loops.values():
                if not loop.state.ran:
                    loop.state.done = True
        self._ctx.on_change()

    def _run_pod(self) -> None:
        self.pod = self._ctx.pod = with_token_volume(self._pod_in, self._ctx.lookup, self._ctx.api)
        admitted = [*(self.pod["spec"].get("initContainers") or []), *self.pod["spec"]["containers"]]
        for spec in admitted:  # as admission stored them: with the service-account token's mount
            self._loops[spec["name"]].spec = spec
        self.start_time = now_iso()
        reported = None
        while not self._stop.is_set():
            try:
                self._ctx.volumes = materialize(
                    self.pod, self._ctx.lookup, self.work_dir, api=self._ctx.api, allocatable=self._ctx.allocatable
                )
                break
            except MountFailure as e:
                if str(e) != reported:
                    self._ctx.event("FailedMount", str(e), "Warning")
                    reported = str(e)
                    self._ctx.on_change()
                self._stop.wait(self._ctx.retry_s)
        if self._stop.is_set():
            self._give_up_unstarted()
            return
        with self._lock:
            self._conditions.update({"PodReadyToStartContainers": "True", "Initialized": "True"})
        if not self._initialize():
            self._give_up_unstarted()
            return
        for loop in self._regular:
            loop.start()
        self._watch()

    def _initialize(self) -> bool:
        """Init containers in order; False when the pod ends before its regular containers may start."""
        for loop in self._init:
            loop.start()
            while True:
                with self._lock:
                    state = loop.state
                    if state.kind == "sidecar":
                        through = state.running and state.started
                    else:
                        through = state.done and state.exit_code() == 0
                    ended = state.done and not through
                if self._stop.is_set():
                    return False
                if through:
                    break
                if ended:  # a plain init container failed under restartPolicy Never (else it is restarted)
                    self._stop_containers(self._init, self.grace_s)
                    return False
                self._stop.wait(WATCH_S)
        return True

    def _watch(self) -> None:
        """The pod's life after initialization: end the sidecars once no regular container will run again, and
        evict the pod when an emptyDir passes its sizeLimit."""
        limited = [v for v in self._ctx.volumes.values() if v.size_limit_bytes is not None]
        sidecars = [loop for loop in self._init if loop.state.kind == "sidecar"]
        storage_due = time.monotonic() + 1.0
        while not self._stop.wait(WATCH_S):
            with self._lock:
                regular_done = all(loop.state.done for loop in self._regular)
            if sidecars and regular_done and not self._sidecars_stopping:
                self._sidecars_stopping = True
                self._stop_containers(sidecars, self.grace_s)
            if self.finished():
                return
            if limited and time.monotonic() >= storage_due:
                storage_due = time.monotonic() + 1.0
                for vol in limited:
                    used = sum(f.stat().st_size for f in vol.host.rglob("*") if f.is_file())
                    if used > (vol.size_limit_bytes or 0):
                        spec = next(v for v in self.pod["spec"]["volumes"] if v["name"] == vol.name)
                        self.evict_for_storage(vol.name, spec["emptyDir"]["sizeLimit"])
                        return
