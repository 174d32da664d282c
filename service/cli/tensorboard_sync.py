"""`rljob tensorboard ID --sync DIR`: copy a job's TensorBoard event files to a local directory.

Operator-side code, handed to the client-side command through CliContext (main.py), because the event files are
what the job wrote: untrusted input, read only through service/adapters/run_reads.py (no links followed, regular
files only, bounded reads, gs:// with timeouts), which the client-side modules may not import. It runs on the
caller's machine with the caller's own access to the run directory (a local path, or gs:// with their credentials).

Event files only grow (TensorBoard appends records), so a file already copied is continued from its local size:
syncing again while the job trains copies only what is new.
"""

from __future__ import annotations

import re
from pathlib import Path

from service.adapters.run_reads import list_run_dir, read_run_file
from service.domain.records.errors import RunFileRefused
from trainer.contract import join_uri
from trainer.storage import StorageError

from .client import CliError, CliExit

EVENT_FILE_MARKER = "events.out.tfevents."  # as trainer/progress/tensorboard_scalars.py reads them
MAX_EVENT_FILES = 1000
MAX_EVENT_FILE_BYTES = 4 * 1024**3  # a run's scalars are megabytes; a file past this is not TensorBoard's
CHUNK_BYTES = 16 * 1024**2
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,255}$")  # a name written under DIR: no separators, nothing hidden


def sync_event_files(run_uri: str, logdir: str, dest: Path) -> list[str]:
    """Copy the event files directly in `logdir` (inside the run directory `run_uri`) into `dest`; returns the names
    that received bytes. Raises CliError for a refused file or unreadable storage."""
    try:
        names = sorted(n for n in list_run_dir(run_uri, logdir) if EVENT_FILE_MARKER in n and _SAFE_NAME.match(n))
        if len(names) > MAX_EVENT_FILES:
            raise CliError(f"{logdir} holds over {MAX_EVENT_FILES} event files: not synced", CliExit.FAILED)
        dest.mkdir(parents=True, exist_ok=True)
        return [name for name in names if _copy_new_bytes(run_uri, join_uri(logdir, name), dest / name)]
    except RunFileRefused as e:
        raise CliError(f"not synced: {e}", CliExit.FAILED) from e
    except StorageError as e:
        raise CliError(f"cannot read {logdir}: {e}", CliExit.FAILED) from e
    except OSError as e:
        raise CliError(f"cannot write to {dest}: {e}", CliExit.BAD_INPUT) from e


def _copy_new_bytes(run_uri: str, source: str, target: Path) -> bool:
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise CliError(f"{target} is not a regular file: not overwritten", CliExit.BAD_INPUT)
    offset = target.stat().st_size if target.exists() else 0
    copied = False
    with target.open("ab") as out:
        while offset < MAX_EVENT_FILE_BYTES:
            chunk = read_run_file(run_uri, source, limit=CHUNK_BYTES, start=offset)
            if chunk is None or not chunk.data:
                break
            out.write(chunk.data)
            offset += len(chunk.data)
            copied = True
    return copied
