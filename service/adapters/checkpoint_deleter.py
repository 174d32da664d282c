"""Deleting a finished run's expired actor checkpoints, local or gs:// (the leader's checkpoint_expiry.py calls it).

What a run directory holds was written by the team's code: hostile input. So, locally:
- the run directory and every directory below it are opened with O_NOFOLLOW relative to the one above (openat), from
  the spec's `output` down (the reconcile checked the run directory against the team's locations, links resolved,
  just before): no link anywhere under the output is followed, and nothing outside the run directory is reached;
- a tree is walked by directory fds; each entry is looked at with lstat: a regular file is unlinked, a symlink is
  unlinked itself (never what it points at), a directory is emptied the same way then removed; anything else (a
  FIFO, a socket, a device) is left in place and counted (`left`), so its directory stays;
- a path to delete is a plain relative path (no '', '.' or '..' segment) under the run directory.

On gs:// there are no links: the checkpoint's prefix (`<dir>/`, so actor/1 never matches actor/10) is listed and its
objects are deleted with the client's batch (one multipart request per BATCH_SIZE deletes), each part given a
Content-ID: the protocol allows one (https://cloud.google.com/storage/docs/batch), the Python client sends none, and
fake-gcs-server (v1.54.0, fakestorage/server.go handleBatchCall) skips every part without one, answering an empty
multipart the client rejects ("Bad response: not multi-part") with nothing deleted. A part answered 404 was
already gone (a pass killed after the request): that is what was wanted.
"""

from __future__ import annotations

import email.generator
import email.mime.multipart
import functools
import io
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from service.domain.records.errors import RunFileRefused
from service.domain.records.models import JobRecord
from service.domain.rounds.checkpoint_expiry import TreeSize
from trainer.contract import Stage, local_path, location_kind
from trainer.contract.run.best_checkpoint import BestCheckpoint
from trainer.storage import StorageError, store_for

from .nofollow_dirs import DIR_FLAGS, open_dir_chain
from .run_reads import read_run_file

BATCH_SIZE = 100  # deletes per batch request: Cloud Storage's documented limit is 100 calls per batch
MAX_DEPTH = 64  # directories below a checkpoint: Orbax's layout is a few levels deep
MAX_RECORD_BYTES = 1024 * 1024  # a stage marker or best-checkpoint.json: a few KiB
GCS_TIMEOUT_S = 30.0


@dataclass
class _Walk:
    size_bytes: int = 0
    files: int = 0
    left: int = 0


class RunCheckpointStore:
    """CheckpointStore for local and gs:// run directories."""

    def __init__(self, batch_size: int = BATCH_SIZE, on_batch: Callable[[int], None] = lambda deleted: None) -> None:
        self.batch_size = batch_size
        self.on_batch = on_batch  # told each batch's deletes once done (the tests stop a pass between two)

    def list_steps(self, record: JobRecord) -> list[int]:
        uri = record.layout.actor_checkpoints
        if location_kind(uri) == "gcs":
            bucket, name = _gcs_parts(uri)
            blobs = _client(uri).list_blobs(bucket, prefix=f"{name}/", delimiter="/", timeout=GCS_TIMEOUT_S)
            list(blobs)  # the prefixes are known once the pages are read
            names = [p[len(name) + 1 :].rstrip("/") for p in blobs.prefixes]
        else:
            names = _local_subdirs(record.layout.root, _inside(record, uri))
        return sorted(int(n) for n in names if n.isdigit())

    def referenced(self, record: JobRecord) -> dict[str, str]:
        layout = record.layout
        found: dict[str, str] = {}
        marker = _read_json(layout.root, layout.stage_marker(Stage.EXPORT))
        exported = marker.get("outputs", {}).get("exported_checkpoint") if isinstance(marker, dict) else None
        if isinstance(exported, dict) and isinstance(exported.get("params"), str):
            found["exported"] = exported["params"]
        best = _read_json(layout.root, layout.best_checkpoint_record)
        if isinstance(best, dict):
            try:
                found["best record"] = BestCheckpoint.model_validate(best).params
            except ValueError:
                pass
        return found

    def measure(self, record: JobRecord, path: str) -> TreeSize:
        uri = f"{record.layout.root}/{_plain(path)}"
        if location_kind(uri) == "gcs":
            blobs = list(_gcs_objects(uri))
            return TreeSize(sum(int(b.size or 0) for b in blobs), len(blobs))
        walk = _Walk()
        _local_tree(record.layout.root, path, walk, delete=False)
        return TreeSize(walk.size_bytes, walk.files, walk.left)

    def delete(self, record: JobRecord, path: str) -> TreeSize:
        uri = f"{record.layout.root}/{_plain(path)}"
        if location_kind(uri) == "gcs":
            return self._delete_gcs(uri)
        walk = _Walk()
        _local_tree(record.layout.root, path, walk, delete=True)
        return TreeSize(walk.size_bytes, walk.files, walk.left)

    def _delete_gcs(self, uri: str) -> TreeSize:
        client = _client(uri)
        blobs = list(_gcs_objects(uri))
        for start in range(0, len(blobs), self.batch_size):
            chunk = blobs[start : start + self.batch_size]
            batch = content_id_batch(client, raise_exception=False)
            try:
                with batch:
                    for blob in chunk:
                        blob.delete(timeout=GCS_TIMEOUT_S)
            except Exception as e:  # the batch request itself failed (unreachable, refused)
                raise StorageError(f"cannot delete under {uri}: {e}") from e
            failed = [r for r in batch._responses if not (200 <= r.status_code < 300 or r.status_code == 404)]
            if failed:
                raise StorageError(f"cannot delete under {uri}: {len(failed)} of {len(chunk)} deletes answered {failed[0].status_code}")
            self.on_batch(len(chunk))
        return TreeSize(sum(int(b.size or 0) for b in blobs), len(blobs))


def _plain(path: str) -> str:
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise RunFileRefused(f"{path!r} is not a plain path inside the run directory")
    return path


def _inside(record: JobRecord, uri: str) -> str:
    root = record.layout.root.rstrip("/") + "/"
    if not uri.startswith(root):
        raise RunFileRefused(f"{uri} is not inside the run directory {record.layout.root}")
    return _plain(uri[len(root) :])


# ---- gs:// ------------------------------------------------------------------------------------


def _client(uri: str) -> Any:
    client = getattr(store_for(uri), "client", None)
    if client is None:
        raise StorageError(f"{uri}: this service's store for gs:// has no client")
    return client


def _gcs_parts(uri: str) -> tuple[str, str]:
    from trainer.storage.gcs import parse_gs_uri

    return parse_gs_uri(uri.rstrip("/"))


def _gcs_objects(uri: str) -> Iterator[Any]:
    bucket, name = _gcs_parts(uri)
    return iter(_client(uri).list_blobs(bucket, prefix=f"{name}/", timeout=GCS_TIMEOUT_S))


@functools.cache
def _content_id_batch_type() -> type:  # google-cloud-storage is imported only when a gs:// run is deleted from
    from google.cloud.storage.batch import Batch, MIMEApplicationHTTP
    from google.cloud.storage.constants import _DEFAULT_TIMEOUT

    class _ContentIdBatch(Batch):  # type: ignore[misc]
        """The client's Batch, each part with a Content-ID (see the module's docstring)."""

        def _prepare_batch_request(self) -> tuple[dict[str, str], str, Any]:
            if not self._requests:
                raise ValueError("No deferred requests")
            multi = email.mime.multipart.MIMEMultipart()
            timeout = _DEFAULT_TIMEOUT
            for index, (method, uri, headers, body, part_timeout) in enumerate(self._requests):
                part = MIMEApplicationHTTP(method, uri, headers, body)
                part["Content-ID"] = f"<rljob-{index}>"
                multi.attach(part)
                timeout = part_timeout
            buffer = io.StringIO()
            email.generator.Generator(buffer, False, 0).flatten(multi)
            _, payload = buffer.getvalue().split("\n\n", 1)  # the client's own: the headers go as HTTP headers
            return dict(multi.items()), payload, timeout

    return _ContentIdBatch


def content_id_batch(client: Any, *, raise_exception: bool) -> Any:
    """A batch of the client's (`with batch: blob.delete()` defers each delete) whose parts carry a Content-ID."""
    return _content_id_batch_type()(client, raise_exception=raise_exception)


# ---- local files ------------------------------------------------------------------------------


def _open_run_dir(root: str, names: list[str]) -> int | None:
    """An fd of the directory root/names..., each level opened without following a link; None when missing."""
    top = PurePosixPath(local_path(root))

    def refusal(fd: int, name: str, depth: int, e: OSError) -> Exception:
        return RunFileRefused(f"{name} in {root} is not a plain directory ({e.strerror}): nothing under it is touched")

    return open_dir_chain(str(top.parent), [top.name, *names], refusal)


def _local_subdirs(root: str, path: str) -> list[str]:
    fd = _open_run_dir(root, path.split("/"))
    if fd is None:
        return []
    try:
        with os.scandir(fd) as entries:
            return [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    finally:
        os.close(fd)


def _local_tree(root: str, path: str, walk: _Walk, *, delete: bool) -> None:
    """Measure (or delete) the file or tree at `path` in the run directory; a missing one is nothing."""
    names = _plain(path).split("/")
    parent = _open_run_dir(root, names[:-1])
    if parent is None:
        return
    try:
        _entry(parent, names[-1], walk, delete=delete, depth=0)
    finally:
        os.close(parent)


def _entry(dir_fd: int, name: str, walk: _Walk, *, delete: bool, depth: int) -> None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        if depth >= MAX_DEPTH:
            raise RunFileRefused(f"a checkpoint holds directories over {MAX_DEPTH} levels deep: not deleted")
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)  # a link swapped in since the lstat: ELOOP, never followed
        except FileNotFoundError:
            return
        try:
            with os.scandir(fd) as entries:
                children = [e.name for e in entries]
            left_before = walk.left
            for child in children:
                _entry(fd, child, walk, delete=delete, depth=depth + 1)
        finally:
            os.close(fd)
        if delete and walk.left == left_before:
            os.rmdir(name, dir_fd=dir_fd)
    elif stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
        if stat.S_ISREG(info.st_mode):
            walk.size_bytes += info.st_size
        walk.files += 1
        if delete:
            os.unlink(name, dir_fd=dir_fd)  # a link's own name: unlink never follows it
    else:
        walk.left += 1


def _read_json(root: str, uri: str) -> object:
    """A small JSON file the run wrote (bounded, no links), or None when absent, too big or not JSON."""
    try:
        found = read_run_file(root, uri, limit=MAX_RECORD_BYTES, start=0)
    except RunFileRefused:
        return None
    if found is None or found.more_after:
        return None
    try:
        return json.loads(found.data)
    except ValueError:
        return None
