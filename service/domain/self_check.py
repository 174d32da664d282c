"""Start-up self-checks of a backend (`rljob doctor`'s checks): one line each, ok / warn / fail.

Domain-neutral on purpose: the Kubernetes adapter produces them (service/adapters/k8s_cluster/doctor.py),
the app logs them once and /readyz shows them. A failed check does not make the service unready: most of
them are about optional pieces (Kueue, the HF token, the visibility API) or about the trainer's world, and
an unready pod only gets restarted into the same cluster, which fixes none of them.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any, Literal

CheckStatus = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class CheckLine:
    status: CheckStatus
    name: str  # what was checked: "api kueue.x-k8s.io/v1beta2", "rbac get localqueues", "queue team-ml"
    message: str = ""  # what was found
    fix: str = ""  # for warn/fail: what to do

    def render(self) -> str:
        text = f"{self.status:<4}  {self.name}"
        if self.message:
            text += f": {self.message}"
        if self.fix and self.status != "ok":
            text += f"\n      fix: {self.fix}"
        return text

    def public(self) -> dict[str, Any]:
        return asdict(self)


def failed(lines: list[CheckLine]) -> bool:
    return any(line.status == "fail" for line in lines)


class SelfCheckReport:
    """The latest start-up check lines, written by one thread and read by /readyz."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: list[CheckLine] | None = None

    def set(self, lines: list[CheckLine]) -> None:
        with self._lock:
            self._lines = list(lines)

    def lines(self) -> list[CheckLine] | None:
        """None: not run (or not finished) yet."""
        with self._lock:
            return None if self._lines is None else list(self._lines)
