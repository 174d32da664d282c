"""A job's reproducibility record (repro.json, trainer/contract/run/repro.py), read through the RunFiles port."""

from __future__ import annotations

from service.domain.records.errors import ReproNotFound, RunFileRefused
from service.domain.records.models import JobRecord
from service.domain.records.ports import RunFiles
from trainer.contract import ReproRecord


def read_job_repro(run_files: RunFiles | None, record: JobRecord) -> ReproRecord:
    """The record the trainer wrote; ReproNotFound says why there is none."""
    if run_files is None:
        raise ReproNotFound(f"this service reads no run directories, so job {record.id}'s repro record cannot be shown")
    repro = run_files.read_repro(record)
    if repro is None:
        raise ReproNotFound(
            f"job {record.id} has no repro record yet: the trainer writes repro.json to {record.layout.repro} "
            f"before its first stage (a job still queued, or from a trainer older than the record, has none)"
        )
    return repro


def repro_if_readable(run_files: RunFiles | None, record: JobRecord) -> ReproRecord | None:
    """The record, or None where there is none to read or the job wrote one the service refuses to read
    (a comparison shows it as missing); storage that cannot be read still raises RunFilesUnavailable."""
    try:
        return read_job_repro(run_files, record)
    except (ReproNotFound, RunFileRefused):
        return None
