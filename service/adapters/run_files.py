"""StoreRunFiles: reads a job's manifest, stage logs and completion samples from its run directory
(local or gs://).

Like events_file.py it reads through trainer.storage, the service's one other import from the
trainer besides the contract, so gs:// credentials and retries work the same as for the trainer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from service.domain.errors import RunFilesUnavailable
from service.domain.models import JobRecord
from trainer.contract import STAGE_ORDER, RunLayout, StepSamples, local_path, location_kind, step_from_file_name
from trainer.storage import StorageError, store_for

log = logging.getLogger(__name__)

# A stage log can be large (MaxText prints per step); only its tail is worth sending to a terminal.
MAX_LOG_BYTES = 8 * 1024 * 1024
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
# A samples file holds at most MAX_SAMPLES_PER_STEP samples of MAX_TEXT_CHARS-long texts (under
# 100 KiB); anything far bigger is not one the trainer wrote and is not read into memory.
MAX_SAMPLES_BYTES = 4 * 1024 * 1024


def _read_tail(uri: str, limit: int) -> tuple[bytes, bool] | None:
    """The last `limit` bytes of an object and whether it was cut, or None if it does not exist."""
    if location_kind(uri) == "local":
        path = Path(local_path(uri))
        try:
            with path.open("rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - limit))
                return f.read(), size > limit
        except FileNotFoundError:
            return None
    store = store_for(uri)
    if not store.exists(uri):
        return None
    data = store.read_bytes(uri)  # the gs:// adapter has no ranged read; the cut keeps memory bounded after
    return data[-limit:], len(data) > limit


class StoreRunFiles:
    def read_manifest(self, record: JobRecord) -> dict[str, Any] | None:
        uri = RunLayout(record.spec["output"], record.id).manifest
        try:
            found = _read_tail(uri, MAX_MANIFEST_BYTES)
            if found is None:
                return None
            data, cut = found
            if cut:
                log.warning("job %s: %s is over %d bytes; not read", record.id, uri, MAX_MANIFEST_BYTES)
                return None
            manifest = json.loads(data)
        except (StorageError, ValueError) as e:
            log.warning("job %s: cannot read %s: %s", record.id, uri, e)
            return None
        if not isinstance(manifest, dict) or manifest.get("job_id") != record.id:
            log.warning("job %s: %s is not this job's manifest; ignored", record.id, uri)
            return None
        return manifest

    def stage_log_lines(self, record: JobRecord) -> Iterator[str]:
        layout = RunLayout(record.spec["output"], record.id)
        for stage in STAGE_ORDER:
            uri = layout.stage_log(stage)
            try:
                found = _read_tail(uri, MAX_LOG_BYTES)
            except StorageError as e:
                log.warning("job %s: cannot read %s: %s", record.id, uri, e)
                yield f"==> {stage.value} stage log: cannot read {uri}: {e} <=="
                continue
            if found is None:
                continue
            data, cut = found
            lines = data.decode(errors="replace").splitlines()
            if cut:
                lines = lines[1:]  # the first line was cut mid-way
            yield f"==> {stage.value} stage log ({uri}{f', last {MAX_LOG_BYTES >> 20} MiB' if cut else ''}) <=="
            yield from lines

    def sample_steps(self, record: JobRecord) -> list[int]:
        uri = RunLayout(record.spec["output"], record.id).samples_dir
        try:
            objects = store_for(uri).list(uri)
        except StorageError as e:
            raise RunFilesUnavailable(f"cannot list the samples of job {record.id} in {uri}: {e}") from e
        steps = {step_from_file_name(o.uri.rstrip("/").rsplit("/", 1)[-1]) for o in objects}
        return sorted(step for step in steps if step is not None)

    def read_samples(self, record: JobRecord, step: int) -> StepSamples | None:
        uri = RunLayout(record.spec["output"], record.id).samples_file(step)
        try:
            found = _read_tail(uri, MAX_SAMPLES_BYTES)
        except StorageError as e:
            raise RunFilesUnavailable(f"cannot read {uri}: {e}") from e
        except OSError as e:  # a local file that is a directory, unreadable, ...: not this service's fault
            log.warning("job %s: cannot read %s: %s", record.id, uri, e)
            return None
        if found is None:
            return None
        data, cut = found
        if cut:
            log.warning("job %s: %s is over %d bytes; not read", record.id, uri, MAX_SAMPLES_BYTES)
            return None
        try:
            samples = StepSamples.model_validate_json(data)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'file'}: {err['msg']}" for err in e.errors()[:3])
            log.warning("job %s: %s is not a samples file: %s", record.id, uri, problems)  # never the content
            return None
        if samples.step != step:
            log.warning("job %s: %s holds step %d, not %d; ignored", record.id, uri, samples.step, step)
            return None
        return samples
