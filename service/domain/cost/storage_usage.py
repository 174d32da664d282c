"""Storage GiB-months and cost of a job's run directory, from the history of its `storage` events.

The trainer measures its run directory at each stage's end (trainer/contract/run/storage.py) and the
service logs every measurement as a `storage` event, stamped when it folds it in (the event log keeps
them all; `jobs.storage` only the newest). The size is a step function of time:

- before the first measurement the job counts nothing (its directory is not measured yet);
- from one measurement to the next it holds the earlier one's total;
- after the last it holds that total until the report's end (`as_of`), for a job still running and
  for one that ended alike: a finished run's checkpoints, export and logs stay in the bucket (and are
  paid for) until someone deletes them, or the leader's checkpoint retention deletes its expired
  intermediate checkpoints (checkpoint_expiry.py): each deletion is logged as a `storage` event of the
  newest size less the checkpoint's bytes, so the size drops from then on.

GiB-months saved: what the deleted checkpoints would have added to the window had they been kept, their
bytes from each deletion (or the window's start, if later) to the window's end. A month of a 100 GiB
checkpoint deleted 10 days before the report's end counts 100 x 10/30 GiB-months saved in that report.

A GiB-month is 2^30 bytes held for 30 days: Cloud Storage prices "per GiB per month" and prorates it
over the time an object is stored. Cost = GiB-months x RLJOB_USAGE_STORAGE_PRICE_USD_PER_GIB_MONTH.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from service.domain.records.models import JobEvent, JobRecord
from service.domain.records.ports import JobStore
from service.domain.records.usage_models import JobStorageUsage

# Cloud Storage's list price of Standard storage in a single region such as us-central1 or us-east5
# (https://cloud.google.com/storage/pricing, read 2026-12): USD 0.020 per GiB-month. Prices move and differ
# by region and class; RLJOB_USAGE_STORAGE_PRICE_USD_PER_GIB_MONTH replaces it.
DEFAULT_STORAGE_PRICE_USD_PER_GIB_MONTH = 0.020
GIB = 2**30
MONTH_S = 30 * 86_400
STORAGE_EVENT = "storage"  # progress.py logs each StorageMeasured under this kind
_DIGITS = 6


@dataclass(frozen=True)
class StorageSample:
    """One measurement: the run directory held `total_bytes` from `time` on."""

    time: datetime
    total_bytes: int


def samples_of(events: Iterable[JobEvent]) -> dict[str, list[StorageSample]]:
    """Job id -> its measurements, oldest first, from `storage` events (others are ignored)."""
    found: dict[str, list[StorageSample]] = {}
    for event in sorted(events, key=lambda e: e.seq):
        if event.kind == STORAGE_EVENT and isinstance(event.data.get("total_bytes"), int):
            found.setdefault(event.job_id, []).append(StorageSample(event.time, event.data["total_bytes"]))
    return found


def storage_histories(store: JobStore, records: Iterable[JobRecord]) -> dict[str, list[StorageSample]]:
    """The measurements of these jobs; only jobs with a newest measurement (`storage` set) have any,
    so the others are not asked for."""
    measured = [record.id for record in records if record.report.storage is not None]
    return samples_of(store.events_of_kind(STORAGE_EVENT, measured)) if measured else {}


def byte_seconds(samples: Sequence[StorageSample], start: datetime, end: datetime) -> float:
    """The integral of the run directory's size over [start, end], in byte-seconds."""
    total = 0.0
    for i, sample in enumerate(samples):
        until = samples[i + 1].time if i + 1 < len(samples) else end
        held_s = (min(until, end) - max(sample.time, start)).total_seconds()
        if held_s > 0:
            total += sample.total_bytes * held_s
    return total


def gib_months(samples: Sequence[StorageSample], start: datetime, end: datetime) -> float:
    return byte_seconds(samples, start, end) / GIB / MONTH_S


def job_storage_usage(
    samples: Sequence[StorageSample], start: datetime, end: datetime, price: float, *, freed: Sequence[StorageSample] = ()
) -> JobStorageUsage:
    """`freed`: each deleted checkpoint's bytes at the time it was deleted (CheckpointExpiry), for the GiB-months saved."""
    amount = gib_months(samples, start, end)
    saved = sum(f.total_bytes * max(0.0, (end - max(f.time, start)).total_seconds()) for f in freed if f.time <= end) / GIB / MONTH_S
    return JobStorageUsage(
        total_bytes=samples[-1].total_bytes if samples else None,
        measurements=len(samples),
        gib_months=round(amount, _DIGITS),
        cost_usd=round(amount * price, _DIGITS),
        freed_bytes=sum(f.total_bytes for f in freed if f.time <= end),
        gib_months_saved=round(saved, _DIGITS),
        cost_saved_usd=round(saved * price, _DIGITS),
    )
