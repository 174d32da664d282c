"""A job as the local launcher tracks it, and what it reports for one (launcher.py holds the lifecycle)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.domain.records.models import QueueStatus
from service.domain.records.ports import Observation, ObservedState

from .admission import JobClaim


@dataclass
class LocalJob:
    job_id: str
    dir: Path
    claim: JobClaim  # its team, chips, priority and submission order: what admission weighs
    state: str = "queued"  # queued -> running -> exited | removed (cancelled while queued)
    queue: QueueStatus | None = None  # while queued: the place in line last reported
    popen: subprocess.Popen[bytes] | None = None  # None when re-attached after a restart
    pid: int | None = None
    exit_code: int | None = None
    leader_exited: bool = False
    kill_at: float | None = None  # monotonic time to escalate a cancel to SIGKILL
    message: str = ""
    spawn_error: str | None = None
    output_dropped_bytes: int = 0  # what the runner left out of output.log (job_runner.OutputCap), from exit.json
    capacity: str | None = None  # the kind of capacity it runs as here (local_capacity): what status and usage show

    @property
    def object_name(self) -> str | None:
        return f"pid:{self.pid}" if self.pid else None


def observation(job: LocalJob) -> Observation:
    """What the launcher reports for a job in its state here."""
    name = job.object_name
    if job.state == "queued":
        queue = job.queue or QueueStatus(name=f"team/{job.claim.team}", reason="Admitting", message="being admitted")
        return Observation(job.job_id, ObservedState.QUEUED, message=queue.message, reason=queue.reason, queue=queue)
    if job.state == "running":
        return Observation(job.job_id, ObservedState.RUNNING, message=job.message, object_name=name, capacity=job.capacity)
    if job.state == "removed":
        return Observation(job.job_id, ObservedState.GONE, message="removed from the queue before it started")
    if job.exit_code is None:
        return Observation(
            job.job_id,
            ObservedState.GONE,
            object_name=name,
            message="the trainer process ended without recording an exit code (killed, or the machine restarted)",
        )
    state = ObservedState.SUCCEEDED if job.exit_code == 0 else ObservedState.FAILED
    return Observation(job.job_id, state, exit_code=job.exit_code, object_name=name, message=job.message)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file this launcher or its runner wrote; None when absent or unreadable."""
    try:
        # Written by this launcher and its runner: an object of JSON scalars.
        record: dict[str, Any] | None = json.loads(path.read_text())
        return record
    except (OSError, ValueError):
        return None
