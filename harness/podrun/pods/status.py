"""A pod's status in the API's shape, from what the runner knows; pure (the kubelet's rules).

Upstream sources (kubernetes/kubernetes, read at the commits named; the index gave no release tags):
- phase: pkg/kubelet/kubelet_pods.go getPhase at df5f0243. Regular init containers: one that failed fails the
  pod under restartPolicy Never, one not yet through keeps it Pending. Sidecars (restartable init containers):
  running but not started keeps the pod Pending unless a regular container has started; a terminated or
  restarting sidecar is not counted at all. So once the regular containers have ended, the pod stays Running
  while a sidecar still runs and then ends Succeeded or Failed by the regular containers' exit codes alone.
  A pod that is being deleted and whose containers all ended gets the terminal phase getPhase gives it, else
  Failed (pkg/kubelet/status/status_manager.go TerminatePod at fde2d3c4: a terminal pod is never left Pending
  or Running).
- statuses: pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses at df5f0243 (a pod with init containers
  shows not-yet-started containers as waiting PodInitializing, else ContainerCreating);
  pkg/kubelet/prober/prober_manager.go UpdatePodStatus (the index's copy, commit not shown): a regular init
  container is ready once it exited 0, a sidecar is ready as a regular container is (started, running,
  readiness probe).
- conditions: pkg/kubelet/status/generate.go (the index's copy, commit not shown): ContainersReady and Ready
  need every sidecar and regular container ready; Initialized needs every regular init container exited 0
  and every sidecar started, or any regular container started.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["container", "init", "sidecar"]  # spec.containers, spec.initContainers, those with restartPolicy Always


@dataclass
class ContainerState:
    name: str
    image: str
    kind: Kind = "container"
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    ready: bool = False
    started: bool = False
    has_readiness: bool = False
    done: bool = False  # terminated and will not run again (or never will run)

    @property
    def ran(self) -> bool:
        return "running" in self.state or "terminated" in self.state or self.restarts > 0

    @property
    def running(self) -> bool:
        return "running" in self.state

    def exit_code(self) -> int | None:
        """The exit code of the current attempt if it terminated, else of the last one (waiting to restart)."""
        term = self.state.get("terminated") or self.last_state.get("terminated")
        return None if term is None else int(term["exitCode"])

    def effective_ready(self) -> bool:
        if self.kind == "init":
            return "terminated" in self.state and self.state["terminated"]["exitCode"] == 0
        return self.running and self.started and (self.ready if self.has_readiness else True)

    def initialized(self) -> bool:
        """generate.go isInitContainerInitialized: a sidecar once started, a regular init container once ready."""
        return self.running and self.started if self.kind == "sidecar" else self.effective_ready()

    def as_api(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.effective_ready(),
            "started": self.running and self.started,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.ran:
            out["containerID"] = f"podrun://{self.name}-{self.restarts}"
        return out


def _any_regular_started(containers: list[ContainerState]) -> bool:
    """pkg/kubelet/container/helpers.go HasAnyRegularContainerStarted: one is running or terminated now."""
    return any(c.running or "terminated" in c.state for c in containers)


def _get_phase(init: list[ContainerState], containers: list[ContainerState], restart_policy: str, pod_is_terminal: bool) -> str:
    """kubelet_pods.go getPhase, line by line; every container has a status here (waiting until it runs)."""
    pending_initialization = failed_initialization = 0
    for c in init:
        if c.kind != "init":
            continue
        if c.running:
            pending_initialization += 1
        elif "terminated" in c.state:
            failed_initialization += c.state["terminated"]["exitCode"] != 0
        elif c.last_state.get("terminated"):
            failed_initialization += c.last_state["terminated"]["exitCode"] != 0
        else:
            pending_initialization += 1
    running = waiting = stopped = succeeded = 0
    for c in init:
        if c.kind != "sidecar":
            continue
        if c.running:
            pending_initialization += not c.started
            running += 1
        elif "waiting" in c.state and not c.last_state.get("terminated"):
            pending_initialization += 1
            waiting += 1
    for c in containers:
        if c.running:
            running += 1
        elif "terminated" in c.state:
            stopped += 1
            succeeded += c.state["terminated"]["exitCode"] == 0
        elif c.last_state.get("terminated"):
            stopped += 1
        else:
            waiting += 1
    if failed_initialization > 0 and restart_policy == "Never":
        return "Failed"
    any_regular_started = _any_regular_started(containers)
    if (pending_initialization > 0 and not any_regular_started) or waiting > 0:
        return "Pending"
    if running > 0:
        return "Running"
    if stopped > 0:
        if pod_is_terminal:
            return "Succeeded" if stopped == succeeded else "Failed"
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if restart_policy == "Never" else "Running"
    return "Pending"


def phase(init: list[ContainerState], containers: list[ContainerState], restart_policy: str, terminating: bool) -> str:
    pod_is_terminal = terminating and all(c.done for c in [*init, *containers])
    got = _get_phase(init, containers, restart_policy, pod_is_terminal)
    if pod_is_terminal and got not in ("Succeeded", "Failed"):
        return "Failed"  # status_manager.go TerminatePod
    return got


def pod_status(
    init: list[ContainerState],
    containers: list[ContainerState],
    *,
    restart_policy: str,
    kubelet_conditions: dict[str, str],
    start_time: str | None,
    terminating: bool,
    evicted: tuple[str, str] | None,
    pod_ip: str,
) -> dict[str, Any]:
    sidecars = [c for c in init if c.kind == "sidecar"]
    ready = all(c.effective_ready() for c in [*sidecars, *containers])
    conds = dict(kubelet_conditions)
    if init:
        initialized = all(c.initialized() for c in init) or _any_regular_started(containers)
        conds["Initialized"] = "True" if initialized else "False"
    conds["ContainersReady"] = conds["Ready"] = "True" if ready else "False"
    status: dict[str, Any] = {
        "phase": phase(init, containers, restart_policy, terminating),
        "conditions": [{"type": t, "status": s} for t, s in conds.items()],
        "hostIP": pod_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "containerStatuses": [c.as_api() for c in containers],
    }
    if init:
        status["initContainerStatuses"] = [c.as_api() for c in init]
    if start_time:
        status["startTime"] = start_time
    if evicted:
        status["phase"] = "Failed"
        status["reason"], status["message"] = evicted
    return status
