"""ManifestSizes: what a job's manifest.json says about the artifacts its events named, worked out apart from the job.

A manifest lists every file of the run (trainer/storage/manifest.py), up to 200,000 of them; the events name a few
artifacts, often directories (a checkpoint, an export). size_manifest reduces the one to the other: each named
artifact's size and checksum if it is a file, its total size and file count if it is a directory (a directory has no
single checksum, so none is invented for it), the run's references and its total. The result is small whatever the
manifest's size, so the parse and the reduction can run in another process (service/adapters/manifest_worker.py),
where they do not hold the service's interpreter lock; progress.fold_manifest applies it to the job.

The files are sorted once and each directory artifact is a range found by bisection: O((artifacts + files) log files),
where a scan per artifact held the write lock for 102 s at 3,000 artifacts x 300,000 files.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.contract import local_path


@dataclass(frozen=True)
class ManifestSizes:
    sized: dict[str, dict[str, Any]]  # artifact name -> size_bytes, file_count (and checksum for a single file)
    references: dict[str, Any]  # name -> URI: used by the run, owned by someone else (the conversion cache)
    run: dict[str, Any] | None  # the whole run directory: uri, size_bytes, file_count


def artifact_key(uri: str) -> str:
    """How a manifest's files and the events' artifacts are matched: the URI's local path, no trailing slash."""
    return local_path(uri).rstrip("/")


def size_manifest(manifest: dict[str, Any], artifact_uris: Mapping[str, str]) -> ManifestSizes:
    """The sizes of the artifacts named in `artifact_uris` (name -> URI) as `manifest` lists their files.
    Values of the wrong type are passed on as they are: fold_manifest validates what it applies."""
    files = [f for f in manifest.get("artifacts") or [] if isinstance(f, dict) and isinstance(f.get("uri"), str)]
    by_uri = {artifact_key(f["uri"]): f for f in files}
    keys = sorted(by_uri)
    sized: dict[str, dict[str, Any]] = {}
    for name, artifact_uri in artifact_uris.items():
        uri = artifact_key(artifact_uri)
        single = by_uri.get(uri)
        if single is not None:
            sized[name] = {"size_bytes": single.get("size_bytes"), "file_count": 1, "checksum": single.get("checksum")}
        elif inside := [by_uri[k] for k in _under(keys, uri + "/")]:
            sized[name] = {"size_bytes": sum(_size(f) for f in inside), "file_count": len(inside)}
    references = manifest.get("references")
    run = None
    if manifest.get("run_uri"):
        run = {"uri": manifest["run_uri"], "size_bytes": manifest.get("total_bytes"), "file_count": manifest.get("file_count", len(files))}
    return ManifestSizes(sized, dict(references) if isinstance(references, dict) else {}, run)


def _under(keys: list[str], prefix: str) -> list[str]:
    """The sorted `keys` that start with `prefix`: one contiguous range of a sorted list."""
    start = bisect.bisect_left(keys, prefix)
    end = start
    while end < len(keys) and keys[end].startswith(prefix):
        end += 1
    return keys[start:end]


def _size(entry: dict[str, Any]) -> int:
    size = entry.get("size_bytes")
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0
