"""A pod's status in the API's shape, from what the runner knows; pure (the kubelet's getPhase rules).

Phase: Pending until a container has run; with restartPolicy Always, Running until deletion; otherwise
Succeeded when every container ended with 0 and will not restart, Failed when all ended and one did not
exit 0. A pod being deleted ends Succeeded only if every container exited 0 (Kubernetes >= 1.27).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ContainerState:
    name: str
    image: str
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    ready: bool = False
    started: bool = False
    has_readiness: bool = False
    done: bool = False  # terminated and will not run again

    @property
    def ran(self) -> bool:
        return "running" in self.state or "terminated" in self.state or self.restarts > 0

    def effective_ready(self) -> bool:
        running = "running" in self.state
        return running and self.started and (self.ready if self.has_readiness else True)

    def as_api(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.effective_ready(),
            "started": "running" in self.state and self.started,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.ran:
            out["containerID"] = f"podrun://{self.name}-{self.restarts}"
        return out


def phase(containers: list[ContainerState], restart_policy: str, terminating: bool) -> str:
    if not any(c.ran for c in containers):
        return "Failed" if terminating and all(c.done for c in containers) else "Pending"
    if all(c.done for c in containers):
        exits = [c.state.get("terminated", {}).get("exitCode") for c in containers]
        if restart_policy == "Always" and not terminating:
            return "Running"
        return "Succeeded" if all(code == 0 for code in exits) else "Failed"
    return "Running"


def pod_status(
    containers: list[ContainerState],
    *,
    restart_policy: str,
    kubelet_conditions: dict[str, str],
    start_time: str | None,
    terminating: bool,
    evicted: tuple[str, str] | None,
    pod_ip: str,
) -> dict[str, Any]:
    ready = all(c.effective_ready() for c in containers)
    conds = dict(kubelet_conditions)
    conds["ContainersReady"] = conds["Ready"] = "True" if ready else "False"
    status: dict[str, Any] = {
        "phase": phase(containers, restart_policy, terminating),
        "conditions": [{"type": t, "status": s} for t, s in conds.items()],
        "hostIP": pod_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "containerStatuses": [c.as_api() for c in containers],
    }
    if start_time:
        status["startTime"] = start_time
    if evicted:
        status["phase"] = "Failed"
        status["reason"], status["message"] = evicted
    return status
