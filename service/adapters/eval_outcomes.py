"""An eval job's per-row outcomes (<run>/eval/outcomes.jsonl), read back for a comparison: untrusted input.

The job wrote the file, so it is read through run_reads (no links, no FIFOs, at most MAX_OUTCOMES_BYTES) and
refused whole, naming the line but never quoting it, when it is not what the trainer writes: a line that is not
a RowOutcome, more than MAX_SUITE_ROWS rows, or one row id twice (a pairing key must be unique, else a row would
count twice in the paired difference). Only what a comparison uses is kept per row (its id and its functions'
scores): the texts are dropped as each line is parsed, so a suite's worth of outcomes costs a few MB.
"""

from __future__ import annotations

from pydantic import ValidationError

from service.domain.records.errors import RunFileRefused, RunFilesUnavailable
from service.domain.records.models import JobRecord
from trainer.contract.run.eval_report import RowOutcome
from trainer.contract.spec.eval_suite import MAX_SUITE_ROWS
from trainer.storage import StorageError

from .run_reads import read_run_file

# A GSM8K row with k=4 completions of 256 tokens is some 7 KB; 20,000 such rows are 140 MB. A comparison reads two
# files at once within the service's memory, so the bound is below that: a suite that large needs fewer samples
# kept per row, not a service that reads gigabytes on a request.
MAX_OUTCOMES_BYTES = 64 * 1024 * 1024


def read_outcomes(record: JobRecord) -> list[RowOutcome] | None:
    """The job's outcomes, texts dropped; None when the file is absent. RunFileRefused when it is too large or not
    the trainer's; RunFilesUnavailable when the storage cannot be read."""
    layout = record.layout
    uri = layout.eval_outcomes
    try:
        found = read_run_file(layout.root, uri, limit=MAX_OUTCOMES_BYTES, start=0)
    except StorageError as e:
        raise RunFilesUnavailable(f"cannot read {uri}: {e}") from e
    if found is None:
        return None
    if found.more_after:
        raise RunFileRefused(f"the outcomes of eval job {record.id} ({uri}) are over {MAX_OUTCOMES_BYTES >> 20} MiB: not read")
    rows: list[RowOutcome] = []
    seen: set[str] = set()
    for number, line in enumerate(found.data.splitlines(), start=1):
        if not line.strip():
            continue
        if len(rows) == MAX_SUITE_ROWS:
            raise RunFileRefused(f"the outcomes of eval job {record.id} hold more than {MAX_SUITE_ROWS} rows (a suite's most): not read")
        try:
            row = RowOutcome.model_validate_json(line)
        except ValidationError as e:
            where = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'line'}: {err['msg']}" for err in e.errors()[:2])
            raise RunFileRefused(f"line {number} of eval job {record.id}'s outcomes is not a row outcome ({where})") from None
        if row.id in seen:
            raise RunFileRefused(f"line {number} of eval job {record.id}'s outcomes repeats row id {row.id}: rows cannot be paired")
        seen.add(row.id)
        rows.append(
            RowOutcome.model_construct(id=row.id, index=row.index, question="", answers=[], greedy="", samples=[], functions=row.functions)
        )
    return rows
