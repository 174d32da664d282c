"""A shared cache of converted MaxText checkpoints, so the same model is never converted twice.

Layout under the cache root (default `<spec.output>/_cache/maxtext`, see `default_cache_root`):

    <root>/<entry>/COMPLETE            the marker: JSON naming the data prefix; written last, if absent
    <root>/<entry>/data-<writer>/...   one converter's output (to_maxtext's base_output_directory)

`<entry>` is `<model-name>-<digest>` where the digest covers the key: source (hub id + revision, or a
content hash of a local / gs:// directory), MaxText model name and dims, MaxText version, dtype,
scan_layers and storage format. Each converter writes into its own `data-<writer>` prefix, so two
converters never touch the same object; publishing is the single create-if-absent write of the marker.
The first marker wins; the loser deletes its data. Readers trust only an entry whose marker exists and
use exactly the prefix it names, so they never see a half-written entry. Publishing copies nothing:
copying a 16 GB 8B checkpoint inside GCS takes minutes, and copying into a shared prefix would let a
late loser overwrite objects a reader is already using.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from trainer.contract import JobSpec, join_uri, local_path, location_kind
from trainer.sizing.hf_model import MaxTextModel
from trainer.storage import ArtifactStore, ObjectInfo, StorageError, store_for
from trainer.storage.local import file_md5

MARKER = "COMPLETE"
DATA_PREFIX = "data-"
CACHE_ROOT_ENV = "RLJOB_CONVERSION_CACHE"
# A data prefix with no marker naming it may belong to a converter that is still writing; only
# prefixes untouched for this long are pruned as orphans (to_maxtext of an 8B model takes minutes).
ORPHAN_GRACE_S = 6 * 3600.0


def default_cache_root(spec: JobSpec, override: str | None = None) -> str | None:
    """`override`, else $RLJOB_CONVERSION_CACHE, else `<spec.output>/_cache/maxtext`; None when "off".

    Next to the runs by default: same bucket, same IAM, shared by every job writing there; `_cache`
    cannot collide with a job id (`rl-...`). A team that shares one cache across outputs sets the env.
    """
    root = override or os.environ.get(CACHE_ROOT_ENV) or join_uri(spec.output, "_cache", "maxtext")
    return None if root == "off" else root.rstrip("/")


def storage_format(*, use_ocdbt: bool, use_zarr3: bool) -> str:
    """How to_maxtext laid out the checkpoint; readers need the same flags, so it is part of the key."""
    parts = [name for name, on in (("ocdbt", use_ocdbt), ("zarr3", use_zarr3)) if on]
    return "+".join(parts) or "tensorstore"


def _files_digest(entries: list[tuple[str, int, str]]) -> str:
    lines = "".join(f"{path}\t{size}\t{checksum}\n" for path, size, checksum in sorted(entries))
    return hashlib.sha256(lines.encode()).hexdigest()


def _is_hidden(relpath: str) -> bool:
    # `.cache/huggingface` (hf download bookkeeping), `.git*`: not model content.
    return any(part.startswith(".") for part in relpath.split("/"))


def source_fingerprint(source: str, revision: str | None = None, *, store: ArtifactStore | None = None) -> str:
    """What identifies a model source's content.

    Hub: the id and revision (pin a commit to make "main" moving invalidate nothing silently).
    Local or gs:// directory: sha256 over (path, size, md5) of its files. GCS keeps md5 in object
    metadata, so a bucket copy is fingerprinted without reading it, and a local copy of the same files
    gets the same fingerprint. Composite objects have only crc32c, which a local copy cannot match.
    """
    kind = location_kind(source)
    if kind == "hub":
        return f"hub:{source}@{revision or 'main'}"
    store = store or store_for(source)
    prefix = source.rstrip("/") + "/"
    entries: list[tuple[str, int, str]] = []
    if kind == "local":
        root = Path(local_path(source))
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and not _is_hidden(rel):
                entries.append((rel, p.stat().st_size, file_md5(p)))
    else:
        for obj in store.list(source):
            rel = obj.uri[len(prefix) :]
            if not _is_hidden(rel):
                if obj.checksum is None:
                    raise StorageError(f"{obj.uri} has no checksum in its metadata; cannot fingerprint {source}")
                entries.append((rel, obj.size_bytes, obj.checksum))
    if not entries:
        raise StorageError(f"model source {source} holds no files")
    return "files:" + _files_digest(entries)


@dataclass(frozen=True)
class CacheKey:
    source: str  # source_fingerprint()
    model_name: str
    model_overrides: str  # canonical JSON of the MaxText overrides (hf_model.py), "" for the named model's own
    maxtext_version: str
    dtype: str
    scan_layers: bool
    storage_format: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:20]

    @property
    def name(self) -> str:
        return f"{re.sub(r'[^a-z0-9.-]', '-', self.model_name.lower())}-{self.digest}"


def installed_maxtext_version() -> str:
    try:
        return metadata.version("maxtext")
    except metadata.PackageNotFoundError:
        return "unknown"


def cache_key_for(
    spec: JobSpec,
    maxtext_model: MaxTextModel,
    *,
    fmt: str,
    source_fp: str | None = None,
    maxtext_version: str | None = None,
) -> CacheKey:
    model = spec.model
    return CacheKey(
        source=source_fp or source_fingerprint(model.source, model.revision),
        model_name=maxtext_model.name,
        model_overrides=json.dumps(maxtext_model.overrides, sort_keys=True) if maxtext_model.overrides else "",
        maxtext_version=maxtext_version or installed_maxtext_version(),
        dtype=model.dtype,
        scan_layers=model.scan_layers,
        storage_format=fmt,
    )


@dataclass(frozen=True)
class CacheEntry:
    name: str
    uri: str  # <root>/<entry>
    data_uri: str  # what to_maxtext wrote: the checkpoint is <data_uri>/0/items
    created_s: float
    size_bytes: int
    file_count: int
    key: dict[str, Any]  # the CacheKey as written in the marker (JSON)

    @property
    def checkpoint_uri(self) -> str:
        return join_uri(self.data_uri, "0", "items")


@dataclass(frozen=True)
class Staging:
    key: CacheKey
    writer: str
    uri: str  # hand this to the converter as its output directory


@dataclass(frozen=True)
class CacheResult:
    entry: CacheEntry
    hit: bool  # found complete before converting
    converted: bool  # this call ran the converter (a loser of a race converted in vain)


class ConversionCache:
    def __init__(self, root: str, *, store: ArtifactStore | None = None, clock: Callable[[], float] = time.time):
        self.root = root.rstrip("/")
        self._store = store or store_for(self.root)
        self._clock = clock

    def entry_uri(self, key: CacheKey) -> str:
        return join_uri(self.root, key.name)

    def _parse_marker(self, entry_uri: str, raw: bytes) -> CacheEntry:
        body = json.loads(raw)
        return CacheEntry(
            name=entry_uri.rsplit("/", 1)[-1],
            uri=entry_uri,
            data_uri=join_uri(entry_uri, body["data"]),
            created_s=float(body["created_s"]),
            size_bytes=int(body["size_bytes"]),
            file_count=int(body["file_count"]),
            key=body["key"],
        )

    def lookup(self, key: CacheKey, *, verify: bool = True) -> CacheEntry | None:
        """The complete entry for key, or None. With verify, its data must still be all there."""
        marker = join_uri(self.entry_uri(key), MARKER)
        try:
            raw = self._store.read_bytes(marker)
        except StorageError:
            if not self._store.exists(marker):
                return None
            # Published between the two calls, or there but unreadable (permissions): read again,
            # and let a second failure propagate.
            raw = self._store.read_bytes(marker)
        try:
            entry = self._parse_marker(self.entry_uri(key), raw)
        except (ValueError, KeyError) as e:
            raise StorageError(
                f"conversion cache marker {marker} is unreadable ({e}); remove the entry with: "
                f"python -m trainer cache prune --root {self.root} --key {key.name}"
            ) from e
        if verify:
            files = self._store.list(entry.data_uri)
            if len(files) != entry.file_count or sum(f.size_bytes for f in files) != entry.size_bytes:
                raise StorageError(
                    f"conversion cache entry {entry.uri} is damaged ({len(files)} of {entry.file_count} files); "
                    f"remove it with: python -m trainer cache prune --root {self.root} --key {entry.name}"
                )
        return entry

    def begin(self, key: CacheKey) -> Staging:
        writer = f"{int(self._clock())}-{uuid.uuid4().hex[:12]}"
        return Staging(key, writer, join_uri(self.entry_uri(key), f"{DATA_PREFIX}{writer}"))

    def publish(self, staging: Staging) -> tuple[CacheEntry, bool]:
        """Make staging the entry unless another converter got there first: (entry, won)."""
        files = self._store.list(staging.uri)
        if not files:
            raise StorageError(f"the converter wrote nothing to {staging.uri}; nothing to publish")
        body = {
            "key": asdict(staging.key),
            "digest": staging.key.digest,
            "data": f"{DATA_PREFIX}{staging.writer}",
            "writer": staging.writer,
            "created_s": self._clock(),
            "file_count": len(files),
            "size_bytes": sum(f.size_bytes for f in files),
        }
        marker = join_uri(self.entry_uri(staging.key), MARKER)
        won = self._store.write_bytes(marker, json.dumps(body, sort_keys=True).encode(), if_absent=True)
        if not won:
            self.abort(staging)
        entry = self._parse_marker(self.entry_uri(staging.key), self._store.read_bytes(marker))
        return entry, won

    def abort(self, staging: Staging) -> None:
        self._store.delete(staging.uri)

    def get_or_convert(self, key: CacheKey, convert: Callable[[str], None]) -> CacheResult:
        """The cached entry for key, else run convert(output_uri) into a private prefix and publish it."""
        found = self.lookup(key)
        if found is not None:
            return CacheResult(found, hit=True, converted=False)
        staging = self.begin(key)
        try:
            convert(staging.uri)
        except BaseException:
            self.abort(staging)
            raise
        entry, _ = self.publish(staging)
        return CacheResult(entry, hit=False, converted=True)

    # --- listing and pruning --------------------------------------------------------------

    def _scan(self) -> tuple[list[CacheEntry], dict[str, list[ObjectInfo]]]:
        """Complete entries, and every data prefix (entry/data-x) with its objects."""
        entries: list[CacheEntry] = []
        data: dict[str, list[ObjectInfo]] = {}
        base = self.root + "/"
        for obj in self._store.list(self.root):
            parts = obj.uri[len(base) :].split("/")
            if len(parts) == 2 and parts[1] == MARKER:
                entry_uri = join_uri(self.root, parts[0])
                try:
                    entries.append(self._parse_marker(entry_uri, self._store.read_bytes(obj.uri)))
                except (StorageError, ValueError, KeyError):
                    continue  # deleted meanwhile or not ours; prune --key can still remove it
            elif len(parts) > 2 and parts[1].startswith(DATA_PREFIX):
                data.setdefault(join_uri(self.root, parts[0], parts[1]), []).append(obj)
        return sorted(entries, key=lambda e: e.created_s, reverse=True), data

    def list_entries(self) -> list[CacheEntry]:
        """Complete entries, newest first."""
        return self._scan()[0]

    def prune(
        self,
        *,
        older_than_s: float | None = None,
        keep_last: int | None = None,
        key: str | None = None,
        orphan_grace_s: float = ORPHAN_GRACE_S,
        dry_run: bool = False,
    ) -> list[str]:
        """Remove entries by age, beyond the newest keep_last, or by name; plus stale orphan data.

        Returns the URIs removed. The marker goes first, so a reader never trusts an entry whose data
        is being deleted. (A job that already looked an entry up and is reading it loses; prune old
        entries, not ones a running job just hit.)
        """
        entries, data = self._scan()
        now = self._clock()
        doomed: list[CacheEntry] = []
        for i, entry in enumerate(entries):
            if key is not None and key in (entry.name, entry.name.rsplit("-", 1)[-1]):
                doomed.append(entry)
            elif older_than_s is not None and now - entry.created_s > older_than_s:
                doomed.append(entry)
            elif keep_last is not None and i >= keep_last:
                doomed.append(entry)
        removed: list[str] = []
        kept_data = {e.data_uri for e in entries if e not in doomed}
        for entry in doomed:
            if not dry_run:
                self._store.delete(join_uri(entry.uri, MARKER))
                self._store.delete(entry.data_uri)
            removed.append(entry.uri)
        if key is not None and not doomed:
            # An entry without a readable marker (damaged): remove its whole prefix by name.
            target = join_uri(self.root, key)
            if any(uri.startswith(target + "/") for uri in data) or self._store.exists(join_uri(target, MARKER)):
                if not dry_run:
                    self._store.delete(join_uri(target, MARKER))
                    self._store.delete(target)
                removed.append(target)
        doomed_data = {e.data_uri for e in doomed}
        for uri, objects in data.items():
            if uri in kept_data or uri in doomed_data or any(uri.startswith(r + "/") for r in removed):
                continue
            newest = max((o.updated_s or now) for o in objects)
            if now - newest > orphan_grace_s:
                if not dry_run:
                    self._store.delete(uri)
                removed.append(uri)
        return removed
