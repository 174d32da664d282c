"""The status read and the list page as JSON bytes, without a thread hop when the job is in memory.

Where a status read's time went (bench/control_plane/control_plane.py, bench/control_plane/README.md): the thread-pool hop for the store
read (and the GIL hand-offs it brings under load), the SQL read and record build, the JobPublic build
and its validation and serialization. Here:
- the record comes from the store's shared records (SQLite: this process writes every job, and each
  write drops what it touched; adapters/store/shared_records.py) on the event loop; only a miss takes
  the hop;
- an ended job's public view no longer changes with time (usage, goodput, health and ETA all stop at
  its end), so its JSON is rendered once per record and kept; a job still under way is rendered at a
  read's `now` and its JSON answers the reads of the next LIVE_VIEW_S while its record is the same one:
  any write (a step, an evaluation, a phase) makes a new record and the very next read renders it, so
  only what moves with the clock alone (usage and goodput to now, the ETA, a stall verdict) may be up to
  LIVE_VIEW_S old. A dashboard polling a running job every second or two is the read this serves
  (bench/control_plane/status_read.py --running);
- the JSON is what FastAPI would have written for the JobPublic (pydantic's serializer, same options),
  and a page is those bytes joined as pydantic joins a list.
A store without shared records (PostgreSQL: other replicas write; tests' fakes) reads as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from service.domain.job_service import JobService
from service.domain.records.errors import JobNotFound
from service.domain.records.models import Caller, JobFilters, JobPublic, JobRecord
from service.domain.records.ports import Clock
from trainer.contract import JOB_ID_RE

RENDERED_VIEWS = 2048  # jobs' JSON kept, ended or under way (a few KB each, and the record each was rendered from)
# An ended job's view is kept only if it reads the same this much later: proof, not only reasoning,
# that nothing in it still moves with the clock.
SETTLED_PROBE = timedelta(days=1)
LIVE_VIEW_S = timedelta(seconds=1)  # how long a job under way answers with one rendering of its unchanged record
_dump_json = JobPublic.__pydantic_serializer__.to_json


@runtime_checkable
class SharedReads(Protocol):
    """Optional store capability (SqlJobStore with shared_reads): records held in memory, valid until
    the store's next write of that job; callers never change them."""

    @property
    def shares_reads(self) -> bool: ...

    def shared_record(self, job_id: str) -> JobRecord | None: ...

    def read_shared(self, job_id: str) -> JobRecord | None: ...

    def list_jobs_shared(self, filters: JobFilters, *, before_pk: int | None, limit: int) -> list[tuple[int, JobRecord]]: ...


def public_json(public: JobPublic) -> bytes:
    """As FastAPI writes a `response_model=JobPublic` answer (by_alias, nothing excluded)."""
    return _dump_json(public, by_alias=True)


class JobViews:
    def __init__(self, jobs: JobService, render: Callable[[JobRecord, datetime], JobPublic], clock: Clock) -> None:
        self._jobs = jobs
        self._render = render
        self._clock = clock
        store = jobs.store
        self._shared = store if isinstance(store, SharedReads) and store.shares_reads else None
        self._lock = threading.Lock()  # the list renders on worker threads, the status read on the loop
        # job id -> (the record rendered, its JSON, when it was rendered for a job under way; None: ended, kept for good)
        self._rendered: OrderedDict[str, tuple[JobRecord, bytes, datetime | None]] = OrderedDict()

    async def status(self, caller: Caller, job_id: str) -> Response:
        """GET /v1/jobs/{id}: the job if the caller's team may see it; anything else is 404."""
        if not JOB_ID_RE.match(job_id):
            raise JobNotFound(job_id)
        record = self._shared.shared_record(job_id) if self._shared is not None else None
        if record is None:
            read = self._shared.read_shared if self._shared is not None else self._jobs.store.get
            record = await run_in_threadpool(read, job_id)
        if record is None or not caller.can_see(record.team):
            raise JobNotFound(job_id)  # another team's job looks exactly like a missing one
        return _json(self.view_json(record, self._clock()))

    def held_json(self, caller: Caller, job_id: str) -> bytes | None:
        """The status read's JSON where the job's record is held and the caller's team may see it, without a store
        read; None otherwise, for the route to answer (api/status_shortcut.py)."""
        record = self._shared.shared_record(job_id) if self._shared is not None else None
        if record is None or not caller.can_see(record.team):
            return None
        return self.view_json(record, self._clock())

    def page_json(self, caller: Caller, filters: JobFilters, *, before_pk: int | None, limit: int) -> tuple[bytes, int, int | None]:
        """A list page's jobs as the JSON array FastAPI would write, their count, and the pk to continue
        from (None at the end). Sync: it reads the store."""
        if self._shared is None:
            page, more = self._jobs.list_jobs(caller, filters, before_pk=before_pk, limit=limit)
        else:  # as JobService.list_jobs, from the shared records
            visible = self._jobs.visible_filters(caller, filters)
            rows = [] if visible is None else self._shared.list_jobs_shared(visible, before_pk=before_pk, limit=limit + 1)
            page, more = rows[:limit], len(rows) > limit
        records = [record for _, record in page]
        last_pk = page[-1][0] if more else None
        now = self._clock()
        return b"[" + b",".join(self.view_json(record, now) for record in records) + b"]", len(records), last_pk

    def view_json(self, record: JobRecord, now: datetime) -> bytes:
        with self._lock:
            kept = self._rendered.get(record.id)
            if kept is not None and kept[0] is record and (kept[2] is None or timedelta(0) <= now - kept[2] < LIVE_VIEW_S):
                self._rendered.move_to_end(record.id)
                return kept[1]
        data = public_json(self._render(record, now))
        if self._shared is None:
            return data  # without shared records a record is not the same object twice: nothing could be reused
        if not record.phase.is_terminal():
            self._keep(record, data, now)
        elif public_json(self._render(record, now + SETTLED_PROBE)) == data:
            self._keep(record, data, None)
        return data

    def _keep(self, record: JobRecord, data: bytes, rendered_at: datetime | None) -> None:
        with self._lock:
            self._rendered[record.id] = (record, data, rendered_at)
            self._rendered.move_to_end(record.id)
            while len(self._rendered) > RENDERED_VIEWS:
                self._rendered.popitem(last=False)


def _json(body: bytes) -> Response:
    return Response(body, media_type="application/json")
