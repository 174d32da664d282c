"""Chooses the adapter for a URI. Adapters are created once per process and reused."""

from __future__ import annotations

import functools

from .local import LocalDirStore
from .port import ArtifactStore, StorageError


@functools.cache
def _local() -> LocalDirStore:
    return LocalDirStore()


def store_for(uri: str) -> ArtifactStore:
    if uri.startswith("gs://"):
        from .gcs import gcs_store  # google-cloud-storage is imported only when a gs:// URI is used

        return gcs_store()
    if uri.startswith("/") or uri.startswith("file://"):
        return _local()
    raise StorageError(f"{uri!r} is neither a gs:// URI nor an absolute local path")
