"""The jobs a bench/chip/tpu_job.py call record submitted, each with its trainer events file where one was kept (the
events folder the call's OUT/events/ was copied to): what the benches that read those events start from."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def recorded_jobs(events_dir: Path, record_file: Path) -> Iterator[tuple[str, dict[str, Any], Path]]:
    """(the record's name for the job, what the record holds of it, its events file), for the jobs with events."""
    record = json.loads(record_file.read_text())
    for name, found in record["jobs"].items():
        events_file = events_dir / f"{found['job_id']}.jsonl"
        if events_file.exists():
            yield name, found, events_file


def write_from_call(doc: str, measure: Callable[[Path, Path], dict[str, Any]], result: Path, told: Callable[[dict[str, Any]], str]) -> int:
    """The command line of a bench that reads one call record's jobs: --events and --record, its result written."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=Path, required=True, help="a folder of <job id>.jsonl trainer event files")
    parser.add_argument("--record", type=Path, required=True, help="the tpu_job call record that submitted the jobs")
    args = parser.parse_args()
    found = measure(args.events.resolve(), args.record.resolve())
    result.write_text(json.dumps(found, indent=2) + "\n")
    print(f"wrote {result}: {told(found)}")
    return 0
