"""What one job's trainer may make the service store, and the count of what it refused.

Every line of a job's events.jsonl is team-written input (reward functions run inside the trainer), and
the fold of those events runs in the store's write lock. So the service stores, per job, at most
MAX_STORED_ENTRIES event-log entries that came from the trainer (each with its metric point) and at most
MAX_STORED_BYTES of their JSON; at most MAX_ARTIFACTS artifact names; at most MAX_GOODPUT_ATTEMPTS
attempts' goodput. A line over MAX_EVENT_BYTES is not parsed at all (adapters/events_file.py).

What an event past a bound would have stored is refused and counted (`refused`), and the job's message
says so once. The record's own state still follows every event that is read (step, latest metrics, the
health window, stage), so the job's status stays true; only its history stops growing.

Why these numbers: a real run writes one train-step event per step (about 1-2 KB with every metric Tunix
logs), a few stage, storage and goodput events per stage, and three artifacts (convert.checkpoint,
train.checkpoint, export.export). 100,000 entries are 100,000 steps of history, more than any GRPO run the
spec's defaults describe by three orders; a hostile trainer gets no further than 64 MiB of rows.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field, ValidationError

MAX_EVENT_BYTES = 64 * 1024  # one events.jsonl line; a real train step is 1-2 KB
MAX_STORED_ENTRIES = 100_000  # event-log entries from the trainer, per job
MAX_STORED_BYTES = 64 * 1024 * 1024  # their JSON, per job
MAX_ARTIFACTS = 32  # distinct artifact names from artifact events, per job (a run writes 3)
MAX_GOODPUT_ATTEMPTS = 64  # trainer attempts whose goodput is kept, per job


class TrainerEventCounts(BaseModel):
    """Stored on the job (jobs.trainer_events, migration 0009) and shown on it: what its trainer's events cost."""

    stored: int = Field(default=0, ge=0, description="event-log entries stored from the trainer's events")
    stored_bytes: int = Field(default=0, ge=0, description="their JSON, in bytes")
    refused: int = Field(
        default=0,
        ge=0,
        description=(
            f"events a per-job bound kept out of the store ({MAX_STORED_ENTRIES:,} entries, "
            f"{MAX_STORED_BYTES // (1024 * 1024)} MiB, {MAX_ARTIFACTS} artifact names, {MAX_GOODPUT_ATTEMPTS} attempts' "
            "goodput) or lines over the one-event size; each counted, none stored"
        ),
    )

    @classmethod
    def of_json(cls, value: Any) -> TrainerEventCounts:
        """From the stored JSON; NULL (a job stored before 0009) or a shape this version cannot read is zeros."""
        try:
            return cls.model_validate(value) if value is not None else cls()
        except ValidationError:
            return cls()

    def to_json(self) -> dict[str, int]:
        return self.model_dump()

    def admit(self, entries: list[tuple[str, dict[str, Any]]]) -> bool:
        """Count `entries` (one event's) as stored if they fit the job's bounds; else count a refusal."""
        size = sum(entry_bytes(data) for _, data in entries)
        if self.stored + len(entries) > MAX_STORED_ENTRIES or self.stored_bytes + size > MAX_STORED_BYTES:
            self.refused += 1
            return False
        self.stored += len(entries)
        self.stored_bytes += size
        return True


def entry_bytes(data: dict[str, Any]) -> int:
    """What one event-log entry's data costs in the store (its JSON)."""
    return len(json.dumps(data, separators=(",", ":"), default=str))


def refused_message(counts: TrainerEventCounts) -> str:
    """The job's message when its trainer's events first exceed a bound."""
    return (
        f"the trainer's events exceed what the service stores per job ({MAX_STORED_ENTRIES:,} log entries, "
        f"{MAX_STORED_BYTES // (1024 * 1024)} MiB, {MAX_ARTIFACTS} artifact names, {MAX_GOODPUT_ATTEMPTS} attempts' "
        f"goodput); {counts.refused} refused so far and counted in trainer_events. The job's status still follows "
        "its progress; its stored history stops growing. A trainer (or a reward function) writing events in a loop "
        "is the usual cause."
    )
