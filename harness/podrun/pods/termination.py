"""Stopping containers as the kubelet does: SIGTERM to PID 1, SIGKILL at the end of the grace period, sidecars last.

kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go killContainer at fbba6b47: the "Killing" event
is recorded first, then the container waits for its turn (terminationOrdering, below), then the runtime is
asked to stop it with what is left of the grace period, never less than minimumGracePeriodInSeconds (2 s,
kuberuntime_manager.go at 000f2605); the wait is taken off the grace period in whole seconds.
pkg/kubelet/kuberuntime/kuberuntime_termination_order.go newTerminationOrdering at 0f5507ff: in a pod with
sidecars, a sidecar's turn comes once every regular container and the sidecar declared after it have exited
(so sidecars stop in reverse order of declaration); regular and plain init containers do not wait; a
container that is not running counts as exited; the wait ends early when the grace period runs out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

MIN_GRACE_S = 2.0
POLL_S = 0.05


class Stoppable(Protocol):
    def running(self) -> bool: ...
    def term(self) -> None: ...
    def kill(self) -> None: ...


def is_sidecar(container: dict[str, Any]) -> bool:
    """An init container with restartPolicy Always (pkg/api/v1/pod IsRestartableInitContainer)."""
    return container.get("restartPolicy") == "Always"


def turns(pod_spec: dict[str, Any]) -> dict[str, list[str]]:
    """container name -> the containers it waits for before its SIGTERM (newTerminationOrdering's prereqs)."""
    init = pod_spec.get("initContainers") or []
    if not any(is_sidecar(c) for c in init):
        return {}  # killContainersWithSyncResult orders only pods with a restartable init container
    regular = [c["name"] for c in pod_spec["containers"]]
    waits: dict[str, list[str]] = {}
    later: str | None = None
    for c in reversed(init):
        if is_sidecar(c):
            waits[c["name"]] = [*regular, *([later] if later else [])]
            later = c["name"]
    return waits


def stop_after_grace(target: Stoppable, grace_s: float, waits_for: list[Stoppable] | None = None) -> None:
    """One container's stop, run in the calling thread: its turn, SIGTERM, SIGKILL when the grace is spent."""
    start = time.monotonic()
    while waits_for and any(w.running() for w in waits_for) and time.monotonic() - start < grace_s:
        time.sleep(POLL_S)
    remaining = max(grace_s - int(time.monotonic() - start), MIN_GRACE_S)
    target.term()
    kill_at = time.monotonic() + remaining
    while target.running() and time.monotonic() < kill_at:
        time.sleep(POLL_S)
    target.kill()


def stop_in_background(target: Stoppable, grace_s: float, name: str = "stop") -> None:
    threading.Thread(target=stop_after_grace, args=(target, grace_s), name=f"podrun-{name}", daemon=True).start()


def stop_in_order(
    targets: Mapping[str, Stoppable],
    everyone: Mapping[str, Stoppable],
    waits: dict[str, list[str]],
    grace_s: float,
    on_killing: Callable[[str], None],
) -> list[threading.Thread]:
    """Stop `targets` (name -> container), each in its own thread, each after the ones `waits` names for it."""
    threads = []
    for name, target in targets.items():
        on_killing(name)
        waits_for = [everyone[w] for w in waits.get(name, []) if w in everyone]
        thread = threading.Thread(target=stop_after_grace, args=(target, grace_s, waits_for), name=f"podrun-stop-{name}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads
