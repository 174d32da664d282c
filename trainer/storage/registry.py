"""Chooses the adapter for a URI. Adapters are created once per process and reused."""

from __future__ import annotations

import functools

from trainer.contract.spec.locations import location_kind

from .local import LocalDirStore
from .port import ArtifactStore, StorageError


@functools.cache
def _local() -> LocalDirStore:
    return LocalDirStore()


def store_for(uri: str) -> ArtifactStore:
    kind = location_kind(uri)
    if kind == "gcs":
        from .gcs import gcs_store  # google-cloud-storage is imported only when a gs:// URI is used

        return gcs_store()
    if kind == "local":
        return _local()
    raise StorageError(f"{uri!r} is neither a gs:// URI nor an absolute local path")
