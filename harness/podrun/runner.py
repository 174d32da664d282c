"""PodRunner: what the kubelet does for one pod, with local processes (see harness/podrun/__init__.py).

Volumes first (a failure leaves the pod Pending with a FailedMount event, retried), then each container:
its image's settings, its environment (a missing reference: waiting CreateContainerConfigError,
retried), its process (a missing executable: terminated StartError, exit 128), its probes. Restarts
follow restartPolicy with a doubling back-off (waiting CrashLoopBackOff). Deletion sends SIGTERM to
each container's PID 1 and SIGKILLs what is left after the grace period. emptyDir sizeLimit is watched
as the kubelet's eviction manager does. The pod's status is built in the API's own shape.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.free_port import free_port

from .envvars import POD_IP, ApiAccess, ContainerConfigError, Lookup, container_env
from .images import image_for
from .plan import StartError, plan_container
from .probes import HttpProbe, ProbeWorker, parse_probes
from .process import ContainerProcess
from .status import ContainerState, pod_status
from .volumes import MountFailure, NotEmulated, Volume, container_mounts, materialize, remove_scratch, with_token_volume

MAX_BACKOFF_S = 10.0  # the kubelet doubles from 10 s to 5 min; scaled down for tests


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PodEvent:
    reason: str
    message: str
    type: str = "Normal"


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
        self._pod_in, self._lookup, self.work_dir, self._api = pod, lookup, work_dir, api
        self._services, self._allocatable = services or [], allocatable or {"cpu": "2", "memory": "8Gi"}
        self._venv, self._on_change = venv or Path(sys.prefix), on_change
        self._backoff_s, self._retry_s = restart_backoff_s, retry_s
        self.pod = pod
        spec = pod.get("spec") or {}
        for unsupported in ("initContainers", "ephemeralContainers"):
            if spec.get(unsupported):
                raise NotEmulated(f"{unsupported} are not run by the pod runner")
        self.restart_policy = spec.get("restartPolicy", "Always")
        self.grace_s = float(spec.get("terminationGracePeriodSeconds", 30))
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._terminating = False
        self._containers = {c["name"]: ContainerState(c["name"], c["image"]) for c in spec["containers"]}
        self._procs: dict[str, ContainerProcess] = {}
        self._ports: dict[str, dict[int, int]] = {}
        self._envs: dict[str, dict[str, str]] = {}
        self._volumes: dict[str, Volume] = {}
        self._conditions: dict[str, str] = {}  # kubelet-owned condition type -> "True"/"False"
        self._events: list[PodEvent] = []
        self._evicted: tuple[str, str] | None = None
        self.start_time: str | None = None
        self.errors: list[BaseException] = []  # what the runner could not emulate: the caller raises these

    # -- reading --------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            return pod_status(
                list(self._containers.values()),
                restart_policy=self.restart_policy,
                kubelet_conditions=dict(self._conditions),
                start_time=self.start_time,
                terminating=self._terminating,
                evicted=self._evicted,
                pod_ip=POD_IP,
            )

    def drain_events(self) -> list[PodEvent]:
        with self._lock:
            out, self._events = self._events, []
            return out

    def finished(self) -> bool:
        with self._lock:
            return all(c.done for c in self._containers.values())

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.finished():
                return True
            time.sleep(0.05)
        return self.finished()

    def log_path(self, container: str, *, previous: bool = False) -> Path | None:
        with self._lock:
            attempt = self._containers[container].restarts - (1 if previous else 0)
        path = self.work_dir / "logs" / container / f"{attempt}.log"
        return path if attempt >= 0 else None

    def container_env(self, container: str) -> dict[str, str]:
        """The environment the container's latest attempt started with."""
        with self._lock:
            return dict(self._envs.get(container, {}))

    def container_active(self, container: str) -> bool:
        """Running, or not finished for good (it may still start or restart): its log may still grow."""
        with self._lock:
            return "running" in self._containers[container].state or not self._containers[container].done

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._guarded(self._run_pod), name=f"pod-{self._pod_in['metadata']['name']}", daemon=True).start()

    def terminate(self, grace_s: float | None = None) -> None:
        """Pod deletion: SIGTERM to every container's PID 1, SIGKILL after the grace period."""
        grace = self.grace_s if grace_s is None else grace_s
        with self._lock:
            if self._terminating:
                return
            self._terminating = True
            procs = list(self._procs.items())
        self._stop.set()
        for name, proc in procs:
            self._event("Killing", f"Stopping container {name}")
            proc.term()
        threading.Thread(target=self._kill_after, args=(procs, grace), daemon=True).start()
        self._changed()

    def evict_for_storage(self, volume: str, limit: str) -> None:
        with self._lock:
            self._evicted = ("Evicted", f'Usage of EmptyDir volume "{volume}" exceeds the limit "{limit}". ')
        self._event("Evicted", self._evicted[1], "Warning")
        self.terminate(grace_s=0)

    def cleanup(self) -> None:
        remove_scratch(self._volumes)

    # -- internals ------------------------------------------------------------------------------------

    def _guarded(self, fn: Callable[..., None]) -> Callable[..., None]:
        def run(*args: Any) -> None:
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - surfaced to the caller through .errors
                self.errors.append(e)
                self._changed()

        return run

    def _changed(self) -> None:
        self._on_change()

    def _event(self, reason: str, message: str, kind: str = "Normal") -> None:
        with self._lock:
            self._events.append(PodEvent(reason, message, kind))

    def _kill_after(self, procs: list[tuple[str, ContainerProcess]], grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.running() for _, p in procs):
            time.sleep(0.05)
        for _, proc in procs:
            proc.kill()

    def _run_pod(self) -> None:
        self.pod = with_token_volume(self._pod_in, self._lookup, self._api)
        self.start_time = now_iso()
        reported = None
        while not self._stop.is_set():
            try:
                self._volumes = materialize(self.pod, self._lookup, self.work_dir, api=self._api, allocatable=self._allocatable)
                break
            except MountFailure as e:
                if str(e) != reported:
                    self._event("FailedMount", str(e), "Warning")
                    reported = str(e)
                    self._changed()
                self._stop.wait(self._retry_s)
        if self._stop.is_set():
            with self._lock:
                for c in self._containers.values():
                    c.done = True
            self._changed()
            return
        with self._lock:
            self._conditions.update({"PodReadyToStartContainers": "True", "Initialized": "True"})
        for spec in self.pod["spec"]["containers"]:
            threading.Thread(target=self._guarded(self._run_container), args=(spec,), daemon=True, name=f"container-{spec['name']}").start()
        self._watch_storage()

    def _watch_storage(self) -> None:
        limited = [v for v in self._volumes.values() if v.size_limit_bytes is not None]
        while limited and not self._stop.wait(1.0):
            for vol in limited:
                used = sum(f.stat().st_size for f in vol.host.rglob("*") if f.is_file())
                if used > (vol.size_limit_bytes or 0):
                    spec = next(v for v in self.pod["spec"]["volumes"] if v["name"] == vol.name)
                    self.evict_for_storage(vol.name, spec["emptyDir"]["sizeLimit"])
                    return

    def _prepare(self, spec: dict[str, Any]) -> Any:
        image = image_for(spec["image"])
        if image is None:
            raise _Waiting(
                "ErrImagePull",
                f'podrun has no image "{spec["image"]}": it runs images built from '
                "docker/trainer.Dockerfile and docker/service.Dockerfile only",
            )
        env = container_env(
            self.pod, spec, self._lookup, image_env=image.env, services=self._services, api=self._api, allocatable=self._allocatable
        )
        ports = self._ports.setdefault(spec["name"], {int(p["containerPort"]): free_port() for p in spec.get("ports") or []})
        plan = plan_container(
            self.pod,
            spec,
            image,
            container_mounts(spec, self._volumes),
            env,
            rootfs=self.work_dir / "rootfs" / spec["name"],
            venv=self._venv,
            ports=ports,
        )
        with self._lock:
            self._envs[spec["name"]] = dict(plan.env)
        return plan, parse_probes(spec, plan.ports, plan.named_ports)

    def _run_container(self, spec: dict[str, Any]) -> None:
        name = spec["name"]
        c = self._containers[name]
        backoff = self._backoff_s
        while not self._stop.is_set():
            try:
                plan, probes = self._prepare(spec)
            except (ContainerConfigError, _Waiting) as e:
                reason = getattr(e, "reason", "CreateContainerConfigError")
                with self._lock:
                    first = c.state.get("waiting", {}).get("message") != str(e)
                    c.state = {"waiting": {"reason": reason, "message": str(e)}}
                if first:
                    self._event("Failed", f"Error: {e}", "Warning")
                    self._changed()
                self._stop.wait(self._retry_s)
                continue
            except StartError as e:
                code, started_at = e.exit_code, now_iso()
                self._event("Failed", f"Error: {e}", "Warning")
                with self._lock:
                    c.state = {
                        "terminated": {
                            "exitCode": code,
                            "reason": "StartError",
                            "message": str(e),
                            "startedAt": started_at,
                            "finishedAt": now_iso(),
                        }
                    }
            else:
                code = self._run_attempt(c, plan, probes)
            with self._lock:
                stop = self._stop.is_set() or self.restart_policy == "Never" or (self.restart_policy == "OnFailure" and code == 0)
                if stop:
                    c.done = True
                else:
                    c.restarts += 1
                    c.last_state, c.state = (
                        c.state,
                        {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {backoff:g}s restarting failed container={name}"}},
                    )
            self._changed()
            if stop:
                return
            self._stop.wait(backoff)
            backoff = min(MAX_BACKOFF_S, backoff * 2)
        with self._lock:
            c.done = True
        self._changed()

    def _run_attempt(self, c: ContainerState, plan: Any, probes: list[HttpProbe]) -> int:
        attempt = c.restarts
        proc = ContainerProcess(
            plan, self.work_dir / "logs" / c.name / f"{attempt}.log", self.work_dir / "guard" / c.name / plan.guard_name
        )
        stop_probes, started = threading.Event(), threading.Event()
        with self._lock:
            if self._stop.is_set():
                return 0
            proc.start()
            self._procs[c.name] = proc
            started_at = now_iso()
            c.state, c.ready = {"running": {"startedAt": started_at}}, False
            c.started = not any(p.kind == "startupProbe" for p in probes)
            c.has_readiness = any(p.kind == "readinessProbe" for p in probes)
            if c.started:
                started.set()
        self._event("Started", f"Started container {c.name}")
        self._changed()

        def on_probe(probe: HttpProbe, ok: bool, why: str) -> None:
            self._probe_result(c, proc, probe, ok, why, started)

        for probe in probes:
            ProbeWorker(probe, started=started, stop=stop_probes, on_result=on_probe).start()
        code = proc.wait()
        stop_probes.set()
        with self._lock:
            self._procs.pop(c.name, None)
            c.ready = False
            c.state = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": started_at,
                    "finishedAt": now_iso(),
                }
            }
        return code

    def _probe_result(
        self, c: ContainerState, proc: ContainerProcess, probe: HttpProbe, ok: bool, why: str, started: threading.Event
    ) -> None:
        label = {"startupProbe": "Startup", "livenessProbe": "Liveness", "readinessProbe": "Readiness"}[probe.kind]
        with self._lock:
            if probe.kind == "readinessProbe":
                changed, c.ready = c.ready != ok, ok
            elif probe.kind == "startupProbe" and ok:
                changed, c.started = not c.started, True
                started.set()
            else:
                changed = False
        if not ok:
            self._event("Unhealthy", f"{label} probe failed: {why}", "Warning")
            if probe.kind != "readinessProbe":
                self._event("Killing", f"Container {c.name} failed {label.lower()} probe, will be restarted")
                proc.term()
                threading.Thread(target=self._kill_after, args=([(c.name, proc)], self.grace_s), daemon=True).start()
        if changed or not ok:
            self._changed()


class _Waiting(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
