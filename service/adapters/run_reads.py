"""The one way the service reads what a job wrote in its run directory, local or gs://.

A run directory is written by the team's own code, so what is in it is untrusted input. A stage log
linked to the service's client.yaml would hand out the admin token, a link into another team's run
directory would hand out theirs, a FIFO would hold a request (or the progress poller) for good, and
a link to /dev/zero or a huge file would be read until memory ran out. So, locally:

- the run directory `<output>/<job-id>` and every directory below it are opened with O_NOFOLLOW
  relative to the one above (openat), so no link is followed anywhere under the spec's `output`,
  and nothing opened can lie outside the run directory (the output itself was checked by the
  location policy at submit);
- the file is opened O_NOFOLLOW|O_NONBLOCK (a FIFO's open cannot block) and must be a regular
  file by fstat, with one name: a hard link (st_nlink > 1) could be another team's file or the
  service's client.yaml under a name in the run directory, where no link-following check sees it;
- at most `limit` bytes are read, from an offset or from the end: never to EOF.

On gs:// there are no links or FIFOs, but objects can be any size and the endpoint can hang: reads
are ranged (`limit` bytes at most) and every request has a timeout, the retries a deadline.

Anything refused raises RunFileRefused naming the file (relative to the run directory) and why;
callers turn it into a 409 or a line saying the file is not served, never a 500 or a hang.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from service.domain.records.errors import RunFileRefused
from trainer.contract import local_path, location_kind
from trainer.storage import StorageError, store_for

from .nofollow_dirs import open_dir_chain

GCS_REQUEST_TIMEOUT_S = 10.0  # one request to GCS (connect and read)
GCS_READ_DEADLINE_S = 20.0  # one read with its retries: a request thread is never held longer
MAX_DIR_ENTRIES = 100_000  # a listing reads no further (a samples directory has one file per train step)

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True)
class Chunk:
    """Bytes read from a run file: `data` starts at byte `start` of a file of `size_bytes`."""

    data: bytes
    start: int
    size_bytes: int

    @property
    def cut_before(self) -> bool:
        return self.start > 0

    @property
    def more_after(self) -> bool:
        return self.start + len(self.data) < self.size_bytes


def read_run_file(root: str, uri: str, *, limit: int, start: int | None = None) -> Chunk | None:
    """At most `limit` bytes of the file `uri` in the run directory `root`: from byte `start`, or the
    file's last `limit` bytes when start is None. None when there is no such file.

    Raises RunFileRefused (a link, not a regular file, outside the run directory) or StorageError
    (gs:// unreachable or refusing, within GCS_READ_DEADLINE_S)."""
    if location_kind(uri) == "gcs":
        return _gcs_read(uri, limit, start)
    try:
        return _local_read(root, uri, limit, start)
    except OSError as e:  # EIO, a permission on the output directory: the storage's trouble, not the job's
        raise StorageError(f"cannot read {uri}: {e}") from e


def _local_read(root: str, uri: str, limit: int, start: int | None) -> Chunk | None:
    fd = _open_file(root, uri)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        begin = max(0, size - limit) if start is None else start
        parts: list[bytes] = []
        got = 0
        while got < limit:  # a regular file's pread returns short only at its end
            part = os.pread(fd, limit - got, begin + got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return Chunk(b"".join(parts), begin, max(size, begin + got))
    finally:
        os.close(fd)


def run_file_size(root: str, uri: str) -> int | None:
    """The size of a run file, None when there is none; refused as read_run_file refuses."""
    if location_kind(uri) == "gcs":
        blob = _gcs_blob(uri)
        return None if blob is None else int(blob.size or 0)
    try:
        fd = _open_file(root, uri)
        if fd is None:
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageError(f"cannot look at {uri}: {e}") from e


def list_run_dir(root: str, uri: str) -> list[str]:
    """The names of the regular files directly in the directory `uri` of the run directory (links
    and anything else are left out); [] when there is no such directory. Refuses a directory that
    is a link, and one of more than MAX_DIR_ENTRIES entries."""
    if location_kind(uri) == "gcs":
        return _gcs_list(uri)
    what, output, names = _relative(root, uri)
    try:
        fd = _open_dirs(output, names, what)
        if fd is None:
            return []
        try:
            with os.scandir(fd) as entries:
                found: list[str] = []
                for count, entry in enumerate(entries, 1):
                    if count > MAX_DIR_ENTRIES:
                        raise RunFileRefused(f"the run directory's {what} holds over {MAX_DIR_ENTRIES} entries: not listed")
                    if entry.is_file(follow_symlinks=False):
                        found.append(entry.name)
                return found
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageError(f"cannot list {uri}: {e}") from e


# ---- local files -------------------------------------------------------------------------------


def _relative(root: str, uri: str) -> tuple[str, str, list[str]]:
    """(the path inside the run directory, for messages; the output directory; the names from the
    job's directory down to the file)."""
    top, path = PurePosixPath(local_path(root)), PurePosixPath(local_path(uri))
    inside = path.relative_to(top)  # ValueError: a caller's bug, never a job's doing
    if any(part in ("", ".", "..") for part in inside.parts):
        raise ValueError(f"{uri} is not a plain path inside {root}")
    return str(inside) or ".", str(top.parent), [top.name, *inside.parts]


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a regular file" if stat.S_ISREG(mode) else f"file type {stat.S_IFMT(mode):o}"


def _refusal(dir_fd: int, name: str, place: str, expected: str, what: str) -> RunFileRefused:
    try:
        kind = _kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        kind = "unreadable"
    return RunFileRefused(f"{place} is not {expected} ({kind}): {what} not served")


def _open_dirs(output: str, names: list[str], what: str) -> int | None:
    """An fd of the directory at output/names..., each opened without following a link; None if missing."""

    def refusal(fd: int, name: str, depth: int, e: OSError) -> Exception | None:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EACCES):
            return None
        place = f"the run directory's {'/'.join(names[1 : depth + 1])}" if depth else "the run directory itself"
        return _refusal(fd, name, place, "a plain directory", what)

    return open_dir_chain(output, names, refusal)


def _open_file(root: str, uri: str) -> int | None:
    """An fd of a regular file in the run directory, opened without following a link; None if missing."""
    what, output, names = _relative(root, uri)
    dir_fd = _open_dirs(output, names[:-1], what)
    if dir_fd is None:
        return None
    try:
        fd = os.open(names[-1], _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.EACCES, errno.ENXIO):  # ENXIO: a socket
            raise
        raise _refusal(dir_fd, names[-1], f"the run directory's {what}", "a regular file", "it is") from e
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise RunFileRefused(f"the run directory's {what} is not a regular file ({_kind(info.st_mode)}): it is not served")
    if info.st_nlink > 1:  # the same file under another name: perhaps another team's, or the service's own
        os.close(fd)
        raise RunFileRefused(f"the run directory's {what} is a hard link ({info.st_nlink} names for one file): it is not served")
    return fd


# ---- gs:// objects -----------------------------------------------------------------------------


def _gcs_call(uri: str, action: str, call: Any) -> Any:
    from google.api_core import exceptions as gexc  # imported only when a gs:// run directory is read
    from google.api_core.retry import Retry

    retry = Retry(initial=0.2, maximum=2.0, multiplier=2.0, timeout=GCS_READ_DEADLINE_S)
    try:
        return call(timeout=GCS_REQUEST_TIMEOUT_S, retry=retry)
    except gexc.NotFound:
        return None
    except (gexc.GoogleAPIError, OSError, ValueError) as e:  # requests' errors are OSErrors; ValueError: a bad URI
        raise StorageError(f"cannot {action} {uri}: {e}") from e


def _gcs_client(uri: str) -> Any:
    store = store_for(uri)
    client = getattr(store, "client", None)
    if client is None:
        raise StorageError(f"{uri}: this service's store for gs:// has no client")
    return client


def _gcs_blob(uri: str) -> Any:
    from trainer.storage.gcs import parse_gs_uri

    bucket, name = parse_gs_uri(uri)
    client = _gcs_client(uri)
    return _gcs_call(uri, "look at", lambda **kw: client.bucket(bucket).get_blob(name, **kw))


def _gcs_read(uri: str, limit: int, start: int | None) -> Chunk | None:
    blob = _gcs_blob(uri)
    if blob is None:
        return None
    size = int(blob.size or 0)
    begin = max(0, size - limit) if start is None else start
    end = min(size, begin + limit)  # exclusive
    if end <= begin:
        return Chunk(b"", begin, size)
    # No generation pinned: events.jsonl grows by compose while it is read, and a newer generation
    # holds the same bytes before its end.
    data = _gcs_call(uri, "read", lambda **kw: blob.download_as_bytes(start=begin, end=end - 1, **kw))
    if data is None:  # deleted between the two requests
        return None
    return Chunk(bytes(data[:limit]), begin, max(size, begin + len(data)))


def _gcs_list(uri: str) -> list[str]:
    from trainer.storage.gcs import parse_gs_uri

    bucket, name = parse_gs_uri(uri)
    prefix = f"{name}/" if name else ""
    client = _gcs_client(uri)

    def names(**kw: Any) -> list[str]:
        blobs = client.list_blobs(bucket, prefix=prefix, delimiter="/", max_results=MAX_DIR_ENTRIES + 1, **kw)
        return [b.name[len(prefix) :] for b in blobs]

    found = _gcs_call(uri, "list", names) or []
    if len(found) > MAX_DIR_ENTRIES:
        raise RunFileRefused(f"{uri} holds over {MAX_DIR_ENTRIES} objects: not listed")
    return [n for n in found if n]
