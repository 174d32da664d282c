"""Stopping a child server the way Kubernetes stops a pod: SIGTERM, a grace period for a clean
shutdown, then SIGKILL. One home for the demo, the benches and the tests that start `rljob serve`."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def terminate_then_kill(process: subprocess.Popen[Any], grace_s: float) -> int:
    """SIGTERM `process`, wait up to `grace_s`, then SIGKILL it; returns its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()
