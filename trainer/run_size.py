"""Measures a run directory (trainer/contract/run/storage.py) and reports it as a `storage` event.

Local directories are walked with os.scandir: regular files only, sized with lstat semantics, symlinks
never followed (a link to a dataset or a cache must not be billed to the run), and at most
MAX_ENTRIES entries looked at, after which the sizes are reported as a lower bound (`complete: false`).
A gs:// run directory is sized from the listing's blob metadata (the storage package), nothing read.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from trainer.contract import RunLayout, RunStorage, Stage, local_path, location_kind
from trainer.progress.event_reporter import EventReporter
from trainer.storage import StorageError, store_for

MAX_ENTRIES = 200_000  # a run holds a few thousand files (Orbax writes tens per checkpoint)


def local_file_sizes(root: str, *, max_entries: int = MAX_ENTRIES) -> tuple[list[tuple[str, int]], bool]:
    """(relative path, bytes) of every regular file under root, and whether the walk saw everything."""
    sizes: list[tuple[str, int]] = []
    pending = [""]
    seen = 0
    while pending:
        relative = pending.pop()
        try:
            with os.scandir(os.path.join(root, relative) if relative else root) as entries:
                for entry in entries:
                    seen += 1
                    if seen > max_entries:
                        return sizes, False
                    name = f"{relative}/{entry.name}" if relative else entry.name
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(name)
                    elif entry.is_file(follow_symlinks=False):
                        sizes.append((name, entry.stat(follow_symlinks=False).st_size))
        except FileNotFoundError:
            continue  # removed while we looked: Orbax deleting an old step, a tmp dir renamed
    return sizes, True


def measure_run(layout: RunLayout) -> RunStorage:
    if location_kind(layout.root) == "local":
        root = local_path(layout.root)
        if not Path(root).is_dir():
            return RunStorage.of_files([])
        sizes, complete = local_file_sizes(root)
        return RunStorage.of_files(sizes, complete=complete)
    prefix = layout.root.rstrip("/") + "/"
    objects = store_for(layout.root).list(layout.root)
    return RunStorage.of_files([(o.uri[len(prefix) :], o.size_bytes) for o in objects if o.uri.startswith(prefix)])


def report_run_storage(reporter: EventReporter, layout: RunLayout, stage: Stage | None) -> RunStorage | None:
    """Emit the run directory's size; a failure to measure is a warning, never the run's outcome."""
    try:
        measured = measure_run(layout)
    except (StorageError, OSError) as e:
        print(f"rljob: warning: could not measure the run directory {layout.root}: {e}", file=sys.stderr)
        return None
    reporter.storage(stage, measured)
    return measured
