"""httpGet probes with the kubelet's timing: initialDelaySeconds, periodSeconds, timeoutSeconds,
successThreshold, failureThreshold; liveness and readiness wait for the startup probe to succeed.
A status in [200, 400) is success, anything else (or no answer within timeoutSeconds) a failure.
Other probe kinds (exec, tcpSocket, grpc) are refused as not emulated: our manifests use none.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .volumes import NotEmulated

KINDS = ("startupProbe", "livenessProbe", "readinessProbe")


@dataclass(frozen=True)
class HttpProbe:
    kind: str  # startupProbe | livenessProbe | readinessProbe
    path: str
    port: int  # the loopback port (after remapping)
    initial_delay_s: float
    period_s: float
    timeout_s: float
    success_threshold: int
    failure_threshold: int


def parse_probes(container: dict[str, Any], ports: dict[int, int], named_ports: dict[str, int]) -> list[HttpProbe]:
    probes = []
    for kind in KINDS:
        spec = container.get(kind)
        if not spec:
            continue
        if "httpGet" not in spec:
            others = sorted(k for k in spec if k.endswith(("Get", "Socket", "exec", "grpc")))
            raise NotEmulated(f"{kind}: only httpGet probes are emulated, not {others}")
        get = spec["httpGet"]
        if get.get("scheme", "HTTP") != "HTTP":
            raise NotEmulated(f"{kind}: scheme {get['scheme']}")
        port = get["port"]
        container_port = named_ports[port] if isinstance(port, str) else int(port)
        probes.append(
            HttpProbe(
                kind=kind,
                path=get.get("path", "/"),
                port=ports.get(container_port, container_port),
                initial_delay_s=spec.get("initialDelaySeconds", 0),
                period_s=spec.get("periodSeconds", 10),
                timeout_s=spec.get("timeoutSeconds", 1),
                success_threshold=spec.get("successThreshold", 1),
                failure_threshold=spec.get("failureThreshold", 3),
            )
        )
    return probes


def http_ok(port: int, path: str, timeout_s: float) -> tuple[bool, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers={"User-Agent": "kube-probe/1.35"})
        status = conn.getresponse().status
    except (OSError, http.client.HTTPException) as e:
        return False, f'Get "http://127.0.0.1:{port}{path}": {e.__class__.__name__}: {e}'
    finally:
        conn.close()
    if 200 <= status < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {status}"


class ProbeWorker:
    """One probe of one container attempt; reports transitions through callbacks, stops with the attempt."""

    def __init__(
        self, probe: HttpProbe, *, started: threading.Event, stop: threading.Event, on_result: Callable[[HttpProbe, bool, str], None]
    ) -> None:
        self.probe, self._started, self._stop, self._on_result = probe, started, stop, on_result
        self._thread = threading.Thread(target=self._run, name=f"probe-{probe.kind}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        p = self.probe
        if self._stop.wait(p.initial_delay_s):
            return
        if p.kind != "startupProbe":
            while not self._started.is_set():  # gated by the startup probe, as the kubelet does
                if self._stop.wait(0.05):
                    return
        successes = failures = 0
        while not self._stop.is_set():
            ok, why = http_ok(p.port, p.path, p.timeout_s)
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if ok and successes >= p.success_threshold:
                self._on_result(p, True, "")
                if p.kind == "startupProbe":
                    return  # a startup probe stops once it has succeeded
            elif not ok and failures >= p.failure_threshold:
                self._on_result(p, False, why)
                failures = 0 if p.kind == "readinessProbe" else failures
            if self._stop.wait(p.period_s):
                return
