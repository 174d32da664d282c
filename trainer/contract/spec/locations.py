"""What kind of place a location string names, and the filesystem path of a local one.

Locations are `gs://bucket/path`, an absolute local path (also written `file:///abs/path`), or, for
models, tokenizers and datasets, a Hugging Face Hub id `org/name`. Every reader of a local location
goes through `local_path`, so `file://` means the same thing to the spec, storage, trainer and service.
"""

from __future__ import annotations

from typing import Literal

FILE_SCHEME = "file://"


def location_kind(uri: str) -> Literal["gcs", "local", "hub"]:
    if uri.startswith("gs://"):
        return "gcs"
    if uri.startswith(("/", FILE_SCHEME)):
        return "local"
    return "hub"


def local_path(uri: str) -> str:
    """The path a local location names: `file:///a/b` and `/a/b` are both /a/b (other strings unchanged)."""
    return uri.removeprefix(FILE_SCHEME)
