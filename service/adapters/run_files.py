"""StoreRunFiles: reads a job's manifest, stage logs and completion samples from its run directory
(local or gs://).

Every read goes through run_reads.py: what a job wrote is untrusted input, so links, FIFOs, devices
and directories are refused (RunFileRefused) and no read goes past its bound. A refused samples file
is a 409 naming it; a refused stage log is a line saying so in the log; a refused manifest is
logged and the job's artifacts stay as its events named them.

A manifest within its byte bound can still be too much to parse: 64 MiB of `{},` is 22 million dicts, and
json.loads took the service from 109 to 1,786 MiB, past the Deployment's 1 GiB limit, in every life, during
start-up recovery. So the values it would make are counted in the bytes first (manifest_worker.manifest_values) and a
manifest over MAX_MANIFEST_VALUES is refused unparsed (ManifestRefused), which the job's end records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from pydantic import BaseModel, ValidationError

from service.domain.records.errors import RunFileRefused, RunFilesUnavailable
from service.domain.records.manifest_sizes import ManifestSizes
from service.domain.records.models import JobRecord, ManifestRefused
from trainer.contract import STAGE_ORDER, ReproRecord, StepSamples, step_from_file_name
from trainer.contract.run.best_checkpoint import BEST_RECORD_FILE, BestCheckpoint
from trainer.contract.run.eval_report import RowOutcome
from trainer.storage import StorageError

from .eval_outcomes import read_outcomes
from .manifest_worker import ManifestWorker
from .run_reads import list_run_dir, read_run_file

log = logging.getLogger(__name__)

# A stage log can be large (MaxText prints per step); only its tail is worth sending to a terminal.
MAX_LOG_BYTES = 8 * 1024 * 1024
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
# A samples file holds at most MAX_SAMPLES_PER_STEP samples of MAX_TEXT_CHARS-long texts (under
# 100 KiB); anything far bigger is not one the trainer wrote and is not read into memory.
MAX_SAMPLES_BYTES = 4 * 1024 * 1024
# repro.json is a spec plus a few hashes and versions (a few KiB); a spec's lists are bounded (limits.py).
MAX_REPRO_BYTES = 1024 * 1024


class StoreRunFiles:
    def __init__(self, manifest_worker: ManifestWorker | None = None) -> None:
        self.manifest_worker = manifest_worker or ManifestWorker()

    def read_manifest(self, record: JobRecord) -> ManifestSizes | ManifestRefused | None:
        layout = record.layout
        uri = layout.manifest
        try:
            found = read_run_file(layout.root, uri, limit=MAX_MANIFEST_BYTES, start=0)
            if found is None:
                return None
            if found.more_after:
                log.warning("job %s: %s is over %d bytes; not read", record.id, uri, MAX_MANIFEST_BYTES)
                return ManifestRefused(f"manifest.json is over {MAX_MANIFEST_BYTES} bytes; not read")
        except (StorageError, RunFileRefused) as e:
            log.warning("job %s: cannot read %s: %s", record.id, uri, e)
            return None
        # Counted and parsed away from the service's interpreter lock when large (manifest_worker.py).
        sizes = self.manifest_worker.sizes(found.data, record.id, {name: a.uri for name, a in record.report.artifacts.items()})
        if isinstance(sizes, str):
            log.warning("job %s: %s ignored: %s", record.id, uri, sizes)
            return None
        if isinstance(sizes, ManifestRefused):
            log.warning("job %s: %s not parsed: %s", record.id, uri, sizes.reason)
        return sizes

    def stage_log_lines(self, record: JobRecord) -> Iterator[str]:
        layout = record.layout
        for stage in STAGE_ORDER:
            uri = layout.stage_log(stage)
            try:
                found = read_run_file(layout.root, uri, limit=MAX_LOG_BYTES)
            except RunFileRefused as e:
                log.warning("job %s: %s", record.id, e)
                yield f"==> {stage.value} stage log: {e} <=="
                continue
            except StorageError as e:
                log.warning("job %s: cannot read %s: %s", record.id, uri, e)
                yield f"==> {stage.value} stage log: cannot read {uri}: {e} <=="
                continue
            if found is None:
                continue
            cut = found.cut_before
            lines = found.data.decode(errors="replace").splitlines()
            if cut:
                lines = lines[1:]  # the first line was cut mid-way
            yield f"==> {stage.value} stage log ({uri}{f', last {MAX_LOG_BYTES >> 20} MiB' if cut else ''}) <=="
            yield from lines

    def sample_steps(self, record: JobRecord) -> list[int]:
        layout = record.layout
        uri = layout.samples_dir
        try:
            names = list_run_dir(layout.root, uri)
        except StorageError as e:
            raise RunFilesUnavailable(f"cannot list the samples of job {record.id} in {uri}: {e}") from e
        steps = {step_from_file_name(name) for name in names}
        return sorted(step for step in steps if step is not None)

    def read_samples(self, record: JobRecord, step: int) -> StepSamples | None:
        too_big = f"samples file for step {step} is over {MAX_SAMPLES_BYTES} bytes (a trainer's is under 100 KiB)"
        samples = _read_model(record, record.layout.samples_file(step), MAX_SAMPLES_BYTES, too_big, StepSamples, "a samples file")
        if samples is not None and samples.step != step:
            log.warning("job %s: %s holds step %d, not %d; ignored", record.id, record.layout.samples_file(step), samples.step, step)
            return None
        return samples

    def read_repro(self, record: JobRecord) -> ReproRecord | None:
        too_big = f"repro.json is over {MAX_REPRO_BYTES} bytes (a trainer's is a few KiB)"
        repro = _read_model(record, record.layout.repro, MAX_REPRO_BYTES, too_big, ReproRecord, "a repro record")
        if repro is not None and repro.job_id != record.id:
            log.warning("job %s: %s is job %s's record; ignored", record.id, record.layout.repro, repro.job_id[:64])
            return None
        return repro

    def read_eval_outcomes(self, record: JobRecord) -> list[RowOutcome] | None:
        return read_outcomes(record)

    def read_best_checkpoint(self, record: JobRecord) -> BestCheckpoint | None:
        too_big = f"{BEST_RECORD_FILE} is over {MAX_REPRO_BYTES} bytes (a trainer's is a few hundred)"
        return _read_model(
            record, record.layout.best_checkpoint_record, MAX_REPRO_BYTES, too_big, BestCheckpoint, "a best-checkpoint record"
        )


def _read_model[M: BaseModel](record: JobRecord, uri: str, limit: int, too_big: str, model: type[M], what: str) -> M | None:
    """One file the job wrote, read bounded through run_reads and parsed as `model`: None when it is absent or
    not `what` (logged, never its content), RunFileRefused when it is over `limit`."""
    try:
        found = read_run_file(record.layout.root, uri, limit=limit, start=0)
    except StorageError as e:
        raise RunFilesUnavailable(f"cannot read {uri}: {e}") from e
    if found is None:
        return None
    if found.more_after:
        raise RunFileRefused(f"the run directory's {too_big}: not served")
    try:
        return model.model_validate_json(found.data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'file'}: {err['msg']}" for err in e.errors()[:3])
        log.warning("job %s: %s is not %s: %s", record.id, uri, what, problems)  # never the content
        return None
