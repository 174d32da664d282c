"""Checks before any stage runs: the output (and cache) location is writable, gs:// inputs readable.

Each failure is a StorageError naming the bucket and the missing permission, so the pipeline exits
with ExitCode.STORAGE before spending accelerator time.
"""

from __future__ import annotations

from trainer.contract import JobSpec, RunLayout, location_kind

from .registry import store_for


def gcs_inputs(spec: JobSpec) -> list[tuple[str, str]]:
    """(field, uri) for every input the spec reads from gs://."""
    return [(field, uri) for field, uri in spec.input_locations() if location_kind(uri) == "gcs"]


def preflight(spec: JobSpec, layout: RunLayout, *, cache_root: str | None = None) -> None:
    store_for(layout.root).check_writable(layout.root)
    if cache_root and not cache_root.startswith(layout.root.rstrip("/") + "/"):
        store_for(cache_root).check_writable(cache_root)
    for _field, uri in gcs_inputs(spec):
        store = store_for(uri)
        check = getattr(store, "check_readable", None)  # the local adapter's inputs are checked by the CLI
        if check is not None:
            check(uri)
