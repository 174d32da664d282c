"""EventsFileReader: the ProgressSource that tails each job's trainer `events.jsonl`.

The file is at RunLayout(spec.output, job_id).events, local or gs://; it is read through
trainer.storage (the service's one other import from the trainer, for reading run files).
Local files are read from the job's committed byte offset; other stores return whole objects, so
the offset is applied after reading. The offset moves only when the job service commits a batch it
has folded. Only complete lines are consumed: a line the trainer is still writing is picked up on
the next call. After a service restart the offsets are
gone and the file is read from the start: the job service drops events by seq, so nothing repeats.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from pydantic import ValidationError

from service.domain.models import JobRecord
from service.domain.ports import ProgressBatch
from trainer.contract import RunLayout, TrainerEvent, location_kind, parse_event
from trainer.storage import StorageError, store_for

log = logging.getLogger(__name__)

MAX_READ_BYTES = 4 * 1024 * 1024  # per call, so one huge file cannot stall the poller


class EventsFileReader:
    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self._lock = threading.Lock()

    def read_new(self, record: JobRecord) -> ProgressBatch:
        """Whole lines past the committed offset, at most MAX_READ_BYTES; the offset moves on commit()."""
        uri = RunLayout(record.spec["output"], record.id).events
        with self._lock:
            offset = self._offsets.get(record.id, 0)
        data, more = self._read_from(uri, offset)
        end = data.rfind(b"\n") + 1  # only whole lines
        events: list[TrainerEvent] = []
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                events.append(parse_event(line))
            except ValidationError as e:
                # A line from a newer trainer or a corrupt write: skip it rather than stall the job.
                log.warning("job %s: ignoring unreadable event line in %s: %s", record.id, uri, e.errors()[:1])
        return ProgressBatch(record.id, events, end=offset + end, more=more and end > 0)

    def commit(self, batch: ProgressBatch) -> None:
        with self._lock:
            if batch.end > self._offsets.get(batch.job_id, 0):  # never backwards (two readers raced)
                self._offsets[batch.job_id] = batch.end

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._offsets.pop(job_id, None)

    @staticmethod
    def _read_from(uri: str, offset: int) -> tuple[bytes, bool]:
        """(up to MAX_READ_BYTES from offset, whether the file goes on past them)."""
        if location_kind(uri) == "local":
            path = Path(uri.removeprefix("file://"))
            try:
                with path.open("rb") as f:
                    f.seek(offset)
                    data = f.read(MAX_READ_BYTES + 1)
            except FileNotFoundError:
                return b"", False  # the trainer has not written anything yet
            return data[:MAX_READ_BYTES], len(data) > MAX_READ_BYTES
        try:
            store = store_for(uri)
            if not store.exists(uri):
                return b"", False
            data = store.read_bytes(uri)
        except StorageError as e:
            log.warning("cannot read %s: %s", uri, e)
            return b"", False
        return data[offset : offset + MAX_READ_BYTES], len(data) > offset + MAX_READ_BYTES
