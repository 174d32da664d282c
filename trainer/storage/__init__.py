"""Artifact storage by URI: `gs://bucket/path` or an absolute local path. URIs are the only way
paths are passed between stages; `store_for(uri)` picks the adapter (one GCS client per process).
"""

from .port import ArtifactStore, ObjectInfo, StorageError
from .registry import store_for

__all__ = ["ArtifactStore", "ObjectInfo", "StorageError", "store_for"]
