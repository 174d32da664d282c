"""The artifact-store port shared by the local-directory and GCS adapters."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Protocol


class StorageError(Exception):
    """A storage operation failed; the message names the URI and what to do about it."""


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size_bytes: int
    # "md5:<hex>" or "crc32c:<hex>" where the backend has one for free (GCS object metadata);
    # None where computing it would mean reading the file (the local adapter's list()).
    checksum: str | None = None
    # Last modification, seconds since the epoch; pruning orphaned staging data needs an age.
    updated_s: float | None = None


class ArtifactStore(Protocol):
    def exists(self, uri: str) -> bool: ...

    def read_bytes(self, uri: str) -> bytes: ...

    def write_bytes(self, uri: str, data: bytes, *, if_absent: bool = False) -> bool:
        """Write an object. With if_absent, return False (and write nothing) when it already exists."""

    def append_bytes(self, uri: str, data: bytes) -> None:
        """Add data at the end of the object (created if absent) at a cost that does not grow with its size."""

    def delete(self, uri: str) -> None:
        """Delete the object at uri and everything under uri/ (a missing one is not an error)."""

    def list(self, prefix_uri: str, *, limit: int | None = None) -> list[ObjectInfo]:
        """Every object under prefix_uri (recursive), sorted by URI; with `limit`, at most that many (the first the
        backend lists), so a caller that only needs to know "more than N" never reads a whole bucket."""

    def upload_file(self, local_path: str, uri: str) -> ObjectInfo:
        """Copy one local file (a log, the events file) to uri, streamed rather than read into memory."""

    def upload_dir(self, local_dir: str, uri: str) -> builtins.list[ObjectInfo]: ...

    def download_dir(self, uri: str, local_dir: str) -> builtins.list[str]: ...

    def check_writable(self, uri: str) -> None:
        """Write and delete a probe object under uri; raise StorageError saying what is missing."""
