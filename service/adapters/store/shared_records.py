"""Job records kept in memory for the API's reads, dropped by the store's own writes.

Only sound where every write to the jobs table goes through this process's store: SQLite, whose file
one `rljob serve` owns (the leader lock refuses a second), so SqlJobStore keeps them only when asked to
(`shared_reads`). With PostgreSQL other replicas write too, and nothing here would learn of it.

A read that began before a write must not put back what it read after that write dropped the entry: a
generation counter, moved by every write, makes such a put a no-op (the next read goes to the store).
The records are shared by every request that reads them: nobody may change one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from service.domain.records.models import JobRecord


class SharedRecords:
    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()  # reads on the event loop; puts and drops from worker threads
        self._entries: OrderedDict[str, JobRecord] = OrderedDict()
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            record = self._entries.get(job_id)
            if record is not None:
                self._entries.move_to_end(job_id)
            return record

    def put(self, record: JobRecord, *, read_at_generation: int) -> None:
        with self._lock:
            if read_at_generation != self.generation:
                return  # a write committed while this was read: what was read may be older than it
            self._entries[record.id] = record
            self._entries.move_to_end(record.id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def drop(self, job_ids: Iterable[str]) -> None:
        """After a write transaction (committed or not) that touched these jobs."""
        with self._lock:
            self.generation += 1
            for job_id in job_ids:
                self._entries.pop(job_id, None)
