"""manifest.json: every artifact under a run directory with its size and checksum.

Checksums are "md5:<hex>" (what GCS keeps for ordinary objects, and what `gcloud storage hash` and
`md5sum` print for local copies) or "crc32c:<hex>" for composite GCS objects, which have no md5.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer.contract import RunLayout, local_path

from .local import file_md5
from .port import ArtifactStore
from .registry import store_for

MANIFEST_VERSION = 1
# Objects that are bookkeeping, not artifacts: the manifest itself and leftover write probes.
_SKIP_NAMES = ("manifest.json",)
_SKIP_PREFIXES = (".rljob-probe-",)


def _local_md5(uri: str) -> str:
    return file_md5(Path(local_path(uri)))


def build_manifest(
    layout: RunLayout,
    *,
    store: ArtifactStore | None = None,
    references: Mapping[str, str] | None = None,
    exported_checkpoint: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    store = store or store_for(layout.root)
    base = layout.root.rstrip("/") + "/"
    artifacts = []
    for obj in store.list(layout.root):
        rel = obj.uri[len(base) :]
        name = rel.rsplit("/", 1)[-1]
        if rel in _SKIP_NAMES or name.startswith(_SKIP_PREFIXES):
            continue
        checksum = obj.checksum or _local_md5(obj.uri)
        artifacts.append({"path": rel, "uri": obj.uri, "size_bytes": obj.size_bytes, "checksum": checksum})
    return {
        "version": MANIFEST_VERSION,
        "job_id": layout.job_id,
        "run_uri": layout.root,
        "generated_s": clock(),
        "file_count": len(artifacts),
        "total_bytes": sum(a["size_bytes"] for a in artifacts),
        # Artifacts this run used but does not own, e.g. the converted checkpoint from the cache.
        "references": dict(references or {}),
        # Which weights hf/ holds: last or best, the step, and for best the evaluation with its 95% interval.
        "exported_checkpoint": dict(exported_checkpoint) if exported_checkpoint else None,
        "artifacts": artifacts,
    }


def write_manifest(
    layout: RunLayout,
    *,
    store: ArtifactStore | None = None,
    references: Mapping[str, str] | None = None,
    exported_checkpoint: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build and write `<run>/manifest.json`; returns it. Call after the last artifact is written."""
    store = store or store_for(layout.root)
    manifest = build_manifest(layout, store=store, references=references, exported_checkpoint=exported_checkpoint)
    store.write_bytes(layout.manifest, json.dumps(manifest, indent=1, sort_keys=True).encode())
    return manifest
