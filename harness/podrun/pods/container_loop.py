"""One container of a pod through its attempts, as the kubelet drives it (see harness/podrun/__init__.py).

Each attempt: the image's settings, the environment (a missing reference: waiting CreateContainerConfigError,
retried), the process (a missing executable: terminated StartError, exit 128), its probes. After an attempt
the container is started again, with a doubling back-off (waiting CrashLoopBackOff), when its kind and the
pod's restartPolicy say so: a regular container per restartPolicy; a plain init container only after a
failure and only unless restartPolicy is Never; a sidecar (init container with restartPolicy Always)
whatever it exited with and whatever the pod's restartPolicy (kubernetes
pkg/kubelet/kuberuntime/kuberuntime_container.go computeInitContainerActions at fbba6b47: an exited
restartable init container is always among InitContainersToStart). `halt()` ends that: no new attempt,
because the pod is being deleted or, for a sidecar, because every regular container has ended
(kuberuntime_manager.go computePodActions at 000f2605 clears InitContainersToStart then).
A failed startup or liveness probe kills the attempt (a sidecar's event says "Init container", as
computeInitContainerActions words it); what follows is the restart rule above.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.free_port import free_port

from .envvars import ApiAccess, ContainerConfigError, Lookup, container_env
from .images import image_for
from .plan import ContainerPlan, StartError, plan_container
from .probes import HttpProbe, ProbeWorker, parse_probes
from .process import ContainerProcess
from .status import ContainerState
from .termination import stop_in_background
from .volumes import Volume, container_mounts

MAX_BACKOFF_S = 10.0  # the kubelet doubles from 10 s to 5 min; scaled down for tests


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PodEvent:
    reason: str
    message: str
    type: str = "Normal"


@dataclass
class PodContext:
    """What a pod's containers share: the pod as admitted, its volumes, the node's facts, one lock, the events."""

    pod: dict[str, Any]
    lookup: Lookup
    work_dir: Path
    api: ApiAccess | None
    services: list[dict[str, Any]]
    allocatable: dict[str, str]
    venv: Path
    on_change: Callable[[], None] = lambda: None
    restart_policy: str = "Always"
    grace_s: float = 30.0
    backoff_s: float = 1.0
    retry_s: float = 1.0
    volumes: dict[str, Volume] = field(default_factory=dict)
    ports: dict[str, dict[int, int]] = field(default_factory=dict)  # container -> containerPort -> loopback port
    lock: threading.RLock = field(default_factory=threading.RLock)
    events: list[PodEvent] = field(default_factory=list)

    def event(self, reason: str, message: str, kind: str = "Normal") -> None:
        with self.lock:
            self.events.append(PodEvent(reason, message, kind))


class ContainerLoop:
    def __init__(self, spec: dict[str, Any], state: ContainerState, ctx: PodContext) -> None:
        self.spec, self.state, self._ctx = spec, state, ctx
        self.name = state.name
        self.env: dict[str, str] = {}  # what the latest attempt started with
        self._proc: ContainerProcess | None = None
        self._halt = threading.Event()
        self.errors: list[BaseException] = []

    def start(self) -> None:
        threading.Thread(target=self._guarded, name=f"container-{self.name}", daemon=True).start()

    def halt(self) -> None:
        """No new attempt from now on (a running one goes on until it is stopped)."""
        self._halt.set()

    def running(self) -> bool:
        proc = self._proc
        return proc is not None and proc.running()

    def term(self) -> None:
        proc = self._proc
        if proc is not None:
            proc.term()

    def kill(self) -> None:
        proc = self._proc
        if proc is not None:
            proc.kill()

    def restarts_after(self, code: int) -> bool:
        if self.state.kind == "sidecar":
            return True
        if self.state.kind == "init":
            return self._ctx.restart_policy != "Never" and code != 0
        return self._ctx.restart_policy == "Always" or (self._ctx.restart_policy == "OnFailure" and code != 0)

    # -- internals ------------------------------------------------------------------------------------

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - surfaced to the caller through PodRunner.errors
            self.errors.append(e)
            with self._ctx.lock:
                self.state.done = True
            self._ctx.on_change()

    def _prepare(self) -> tuple[ContainerPlan, list[HttpProbe]]:
        ctx, spec = self._ctx, self.spec
        image = image_for(spec["image"])
        if image is None:
            raise _Waiting(
                "ErrImagePull",
                f'podrun has no image "{spec["image"]}": it runs images built from '
                "docker/trainer.Dockerfile and docker/service.Dockerfile only",
            )
        env = container_env(ctx.pod, spec, ctx.lookup, image_env=image.env, services=ctx.services, api=ctx.api, allocatable=ctx.allocatable)
        with ctx.lock:
            ports = ctx.ports.setdefault(self.name, {int(p["containerPort"]): free_port() for p in spec.get("ports") or []})
        plan = plan_container(
            ctx.pod,
            spec,
            image,
            container_mounts(spec, ctx.volumes),
            env,
            rootfs=ctx.work_dir / "rootfs" / self.name,
            venv=ctx.venv,
            ports=ports,
        )
        with ctx.lock:
            self.env = dict(plan.env)
        return plan, parse_probes(spec, plan.ports, plan.named_ports)

    def _run(self) -> None:
        ctx, c = self._ctx, self.state
        backoff = ctx.backoff_s
        while not self._halt.is_set():
            try:
                plan, probes = self._prepare()
            except (ContainerConfigError, _Waiting) as e:
                reason = getattr(e, "reason", "CreateContainerConfigError")
                with ctx.lock:
                    first = c.state.get("waiting", {}).get("message") != str(e)
                    c.state = {"waiting": {"reason": reason, "message": str(e)}}
                if first:
                    ctx.event("Failed", f"Error: {e}", "Warning")
                    ctx.on_change()
                self._halt.wait(ctx.retry_s)
                continue
            except StartError as e:
                code, started_at = e.exit_code, now_iso()
                ctx.event("Failed", f"Error: {e}", "Warning")
                with ctx.lock:
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
                code = self._attempt(plan, probes)
            with ctx.lock:
                stop = self._halt.is_set() or not self.restarts_after(code)
                if stop:
                    c.done = True
                else:
                    c.restarts += 1
                    c.last_state, c.state = (
                        c.state,
                        {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": f"back-off {backoff:g}s restarting failed container={c.name}",
                            }
                        },
                    )
            ctx.on_change()
            if stop:
                return
            self._halt.wait(backoff)
            backoff = min(MAX_BACKOFF_S, backoff * 2)
        with ctx.lock:
            c.done = True
        ctx.on_change()

    def _attempt(self, plan: ContainerPlan, probes: list[HttpProbe]) -> int:
        ctx, c = self._ctx, self.state
        proc = ContainerProcess(
            plan, ctx.work_dir / "logs" / c.name / f"{c.restarts}.log", ctx.work_dir / "guard" / c.name / plan.guard_name
        )
        stop_probes, started = threading.Event(), threading.Event()
        with ctx.lock:
            if self._halt.is_set():
                return 0
            proc.start()
            self._proc = proc
            started_at = now_iso()
            c.state, c.ready = {"running": {"startedAt": started_at}}, False
            c.started = not any(p.kind == "startupProbe" for p in probes)
            c.has_readiness = any(p.kind == "readinessProbe" for p in probes)
            if c.started:
                started.set()
        ctx.event("Started", f"Started container {c.name}")
        ctx.on_change()

        def on_probe(probe: HttpProbe, ok: bool, why: str) -> None:
            self._probe_result(proc, probe, ok, why, started)

        for probe in probes:
            ProbeWorker(probe, started=started, stop=stop_probes, on_result=on_probe).start()
        code = proc.wait()
        stop_probes.set()
        with ctx.lock:
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

    def _probe_result(self, proc: ContainerProcess, probe: HttpProbe, ok: bool, why: str, started: threading.Event) -> None:
        ctx, c = self._ctx, self.state
        label = {"startupProbe": "Startup", "livenessProbe": "Liveness", "readinessProbe": "Readiness"}[probe.kind]
        with ctx.lock:
            if probe.kind == "readinessProbe":
                changed, c.ready = c.ready != ok, ok
            elif probe.kind == "startupProbe" and ok:
                changed, c.started = not c.started, True
                started.set()
            else:
                changed = False
        if not ok:
            ctx.event("Unhealthy", f"{label} probe failed: {why}", "Warning")
            if probe.kind != "readinessProbe":
                if c.kind == "sidecar":
                    ctx.event("Killing", f"Init container {c.name} failed {label.lower()} probe")
                else:
                    ctx.event("Killing", f"Container {c.name} failed {label.lower()} probe, will be restarted")
                stop_in_background(proc, ctx.grace_s, c.name)
        if changed or not ok:
            ctx.on_change()


class _Waiting(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
