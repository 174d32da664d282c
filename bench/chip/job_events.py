"""The jobs a bench/chip/tpu_job.py call record submitted, each with its trainer events file where one was kept (the
events folder the call's OUT/events/ was copied to): what the benches that read those events start from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def recorded_jobs(events_dir: Path, record_file: Path) -> Iterator[tuple[str, dict[str, Any], Path]]:
    """(the record's name for the job, what the record holds of it, its events file), for the jobs with events."""
    record = json.loads(record_file.read_text())
    for name, found in record["jobs"].items():
        events_file = events_dir / f"{found['job_id']}.jsonl"
        if events_file.exists():
            yield name, found, events_file
