"""EventsFileReader: the ProgressSource that tails each job's trainer `events.jsonl`.

The file is at the job record's layout.events, local or gs://; it is read through
run_reads.py, which refuses a link, a FIFO or anything not a regular file (the job wrote it: a FIFO
would hold the poller for good), and reads a bounded range from the job's committed byte offset,
locally or as a ranged gs:// request. A refused file is logged once per job and read as empty.
The offset moves only when the job service commits a batch it has folded. Only complete lines are
consumed: a line the trainer is still writing is picked up on the next call. After a service restart
the offsets are gone and the file is read from the start: the job service drops events by seq, so
nothing repeats.

`pending()` tells the progress poller whether a read can find anything, without reading: for a
local file its size from an fstat against the committed offset; for an object, whose metadata is a
request, the object's size, asked at most every `remote_check_interval_s` per job (the trainer
batches train steps to an object store every few seconds anyway: trainer/progress/event_reporter.py).

A line over `max_event_bytes` (trainer_event_budget.MAX_EVENT_BYTES) is not parsed: it is reported in
the batch as skipped, as below, and counted against the job's bounds. A read takes at most
`max_read_bytes`. A single line longer than that (a trainer bug: events are
small JSON lines) would otherwise stop the offset for good; once its end is in the file it is
stepped over, reported in the batch (the job's message says so), and reading goes on after it. Its
end is looked for at most MAX_SCAN_BYTES ahead per call, so a file of one endless line costs a bounded read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pydantic import ValidationError

from service.domain.records.errors import RunFileRefused
from service.domain.records.models import JobRecord
from service.domain.records.ports import ProgressBatch, SkippedLine
from service.domain.records.trainer_event_budget import MAX_EVENT_BYTES
from trainer.contract import TrainerEvent, location_kind, parse_event
from trainer.storage import StorageError

from .run_reads import read_run_file, run_file_size

log = logging.getLogger(__name__)

# Per call, so one huge file cannot stall the poller: its parse is one stretch holding the interpreter lock
# (about 15 ms for 1,300 small events; the fold after it goes in paced chunks, service/domain/fold_pacer.py).
MAX_READ_BYTES = 256 * 1024
REMOTE_CHECK_INTERVAL_S = 2.0  # per job: an object's size is a request, not a stat
_SCAN_CHUNK_BYTES = 1024 * 1024  # looking for the end of an over-long line, this much at a time
MAX_SCAN_BYTES = 64 * 1024 * 1024  # and no further per call: a line longer than this is stepped over in parts


class EventsFileReader:
    def __init__(
        self,
        max_read_bytes: int = MAX_READ_BYTES,
        *,
        max_event_bytes: int = MAX_EVENT_BYTES,
        remote_check_interval_s: float = REMOTE_CHECK_INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_read_bytes = max_read_bytes
        self.max_event_bytes = min(max_event_bytes, max_read_bytes)
        self.remote_check_interval_s = remote_check_interval_s
        self._monotonic = monotonic
        self._offsets: dict[str, int] = {}
        self._where: dict[str, tuple[str, str, bool]] = {}  # job id -> (run directory, events URI, is local)
        self._refused: set[str] = set()  # job ids whose refusal is logged already
        self._unreadable: set[str] = set()  # job ids with an unreadable line logged already
        self._next_remote_check: dict[str, float] = {}  # job id -> monotonic time its object may be asked again
        self._lock = threading.Lock()

    def pending(self, record: JobRecord) -> bool:
        """Whether the events file is longer than the committed offset (a partial last line counts:
        the read that finds it costs one small read)."""
        with self._lock:
            offset = self._offsets.get(record.id, 0)
            where = self._where.get(record.id)
        if where is None:  # worked out once per job: asked every round, and a job's output never moves
            layout = record.layout
            where = (layout.root, layout.events, location_kind(layout.events) == "local")
            with self._lock:
                self._where[record.id] = where
        root, uri, local = where
        if not local:
            now = self._monotonic()
            with self._lock:
                if now < self._next_remote_check.get(record.id, now):
                    return False
                self._next_remote_check[record.id] = now + self.remote_check_interval_s
        try:
            size = run_file_size(root, uri)  # locally an open and an fstat, never a read
        except RunFileRefused as e:
            self._log_refused(record.id, e)
            return False
        except StorageError as e:  # unreadable: read_new says why, when the file appears
            if not local:
                log.warning("cannot look at %s: %s", uri, e)
            return False
        return size is not None and size > offset

    def read_new(self, record: JobRecord) -> ProgressBatch:
        """Whole lines past the committed offset, at most max_read_bytes; the offset moves on commit()."""
        layout = record.layout
        uri = layout.events
        with self._lock:
            offset = self._offsets.get(record.id, 0)
        try:
            data, more = self._read_from(layout.root, uri, offset)
            end = data.rfind(b"\n") + 1  # only whole lines
            if end == 0 and more:
                return self._step_over_long_line(record.id, layout.root, uri, offset)
        except RunFileRefused as e:
            self._log_refused(record.id, e)
            return ProgressBatch(record.id, [], end=offset, more=False)
        events: list[TrainerEvent] = []
        oversized: list[SkippedLine] = []
        position = offset
        for line in data[:end].splitlines(keepends=True):
            start, position = position, position + len(line)
            if not line.strip():
                continue
            if len(line) > self.max_event_bytes:  # parsed, it could be a megabyte of metric names in the record
                oversized.append(SkippedLine(uri=uri, offset=start, size_bytes=len(line), limit_bytes=self.max_event_bytes))
                continue
            try:
                events.append(parse_event(line))
            except ValidationError as e:
                # A line from a newer trainer, a corrupt write or a hostile one: skip it rather than stall the job,
                # and say so once per job (a job can write millions).
                self._log_unreadable(record.id, uri, e)
        return ProgressBatch(record.id, events, end=offset + end, more=more and end > 0, skipped=tuple(oversized))

    def commit(self, batch: ProgressBatch) -> None:
        with self._lock:
            if batch.end > self._offsets.get(batch.job_id, 0):  # never backwards (two readers raced)
                self._offsets[batch.job_id] = batch.end

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._offsets.pop(job_id, None)
            self._where.pop(job_id, None)
            self._next_remote_check.pop(job_id, None)
            self._refused.discard(job_id)
            self._unreadable.discard(job_id)

    def _log_unreadable(self, job_id: str, uri: str, error: ValidationError) -> None:
        with self._lock:
            first = job_id not in self._unreadable
            self._unreadable.add(job_id)
        if first:
            log.warning(
                "job %s: ignoring an unreadable event line in %s (further ones of this job are skipped without a word): %s",
                job_id,
                uri,
                error.errors(include_url=False)[:1],
            )

    def _log_refused(self, job_id: str, refused: RunFileRefused) -> None:
        with self._lock:
            first = job_id not in self._refused
            self._refused.add(job_id)
        if first:  # asked every poll: once is enough to say why the job shows no progress
            log.warning("job %s: progress not read: %s", job_id, refused)

    def _step_over_long_line(self, job_id: str, root: str, uri: str, offset: int) -> ProgressBatch:
        """The line at `offset` is longer than one read: skip it once it is complete."""
        line_end = self._line_end(root, uri, offset + self.max_read_bytes)
        if line_end is None:  # still being written: look again on the next call
            return ProgressBatch(job_id, [], end=offset, more=False)
        # Over one read, so over the event bound too (max_event_bytes <= max_read_bytes): named as any over-long line is.
        skipped = SkippedLine(uri=uri, offset=offset, size_bytes=line_end - offset, limit_bytes=self.max_event_bytes)
        log.warning(
            "job %s: skipped an event line of %d bytes at byte %d of %s (over the %d-byte read limit)",
            job_id,
            skipped.size_bytes,
            offset,
            uri,
            self.max_read_bytes,
        )
        return ProgressBatch(job_id, [], end=line_end, more=True, skipped=(skipped,))

    def _read_from(self, root: str, uri: str, offset: int) -> tuple[bytes, bool]:
        """(up to max_read_bytes from offset, whether the file goes on past them)."""
        try:
            chunk = read_run_file(root, uri, limit=self.max_read_bytes, start=offset)
        except StorageError as e:
            log.warning("cannot read %s: %s", uri, e)
            return b"", False
        if chunk is None:
            return b"", False  # the trainer has not written anything yet
        return chunk.data, chunk.more_after

    def _line_end(self, root: str, uri: str, start: int) -> int | None:
        """The offset just past the first newline at or after `start`; None if there is none yet.
        At most MAX_SCAN_BYTES are looked at: past them, a line that goes on is stepped over there."""
        position = start
        while position < start + MAX_SCAN_BYTES:
            try:
                chunk = read_run_file(root, uri, limit=_SCAN_CHUNK_BYTES, start=position)
            except StorageError as e:
                log.warning("cannot read %s: %s", uri, e)
                return None
            if chunk is None or not chunk.data:
                return None
            newline = chunk.data.find(b"\n")
            if newline >= 0:
                return position + newline + 1
            position += len(chunk.data)
        return position
