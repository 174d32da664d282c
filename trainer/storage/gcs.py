"""gs:// adapter on google-cloud-storage: one client per process, retried calls, threaded transfers.

Against the emulator (fake-gcs-server) the same code runs: the client honours STORAGE_EMULATOR_HOST
and then uses anonymous credentials.
"""

from __future__ import annotations

import base64
import builtins
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import cast

from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.cloud import storage
from google.cloud.storage import transfer_manager
from google.cloud.storage.retry import DEFAULT_RETRY, ConditionalRetryPolicy, is_generation_specified

from .port import ObjectInfo, StorageError

PROBE_PREFIX = ".rljob-probe-"
CREATE_BUCKET_HINT = "gcloud storage buckets create gs://{bucket} --location=REGION --uniform-bucket-level-access"
GRANT_HINT = (
    "gcloud storage buckets add-iam-policy-binding gs://{bucket} --member=serviceAccount:SERVICE_ACCOUNT --role=roles/storage.objectAdmin"
)


@dataclass(frozen=True)
class RetrySettings:
    """Exponential backoff for transient failures (connection errors, 408, 429, 5xx)."""

    initial_s: float = 1.0
    maximum_s: float = 30.0
    multiplier: float = 2.0
    # Total time one call may spend retrying; long enough to ride out a short outage or a
    # rolling restart of a proxy, short enough that a dead endpoint fails the stage.
    timeout_s: float = 300.0
    max_workers: int = 8  # threads for many-file transfers

    @classmethod
    def from_env(cls) -> RetrySettings:
        return cls(timeout_s=float(os.environ.get("RLJOB_GCS_RETRY_TIMEOUT_S", cls.timeout_s)))


def parse_gs_uri(uri: str) -> tuple[str, str]:
    """("bucket", "object/name") for gs://bucket/object/name; the name is "" for the bucket root."""
    if not uri.startswith("gs://"):
        raise StorageError(f"{uri!r} is not a gs:// URI")
    bucket, _, name = uri[len("gs://") :].partition("/")
    if not bucket:
        raise StorageError(f"{uri!r} names no bucket")
    return bucket, name.strip("/")


def _checksum(blob: storage.Blob) -> str | None:
    # md5 is absent on composite objects; crc32c is always present. Both come base64-encoded.
    if blob.md5_hash:
        return "md5:" + base64.b64decode(blob.md5_hash).hex()
    if blob.crc32c:
        return "crc32c:" + base64.b64decode(blob.crc32c).hex()
    return None


# Every failure below is caught as GoogleAPIError: an API call's error (GoogleAPICallError), or the
# RetryError raised once retrying an unreachable endpoint has used up its time.
def _server_message(error: gexc.GoogleAPIError) -> str:
    return getattr(error, "message", None) or str(error)


class GcsStore:
    def __init__(self, client: storage.Client, settings: RetrySettings | None = None) -> None:
        self._client = client
        self._settings = settings or RetrySettings()
        s = self._settings
        self._retry: Retry = DEFAULT_RETRY.with_delay(initial=s.initial_s, maximum=s.maximum_s, multiplier=s.multiplier).with_timeout(
            s.timeout_s
        )
        # Creates guarded by if_generation_match=0 are idempotent, so they may be retried; the
        # policy says so explicitly and would disable retries if a caller dropped the precondition.
        self._retry_if_precondition = ConditionalRetryPolicy(self._retry, is_generation_specified, ["query_params"])

    @property
    def client(self) -> storage.Client:
        return self._client

    def uri(self, bucket: str, name: str) -> str:
        return f"gs://{bucket}/{name}"

    def _blob(self, uri: str) -> storage.Blob:
        bucket, name = parse_gs_uri(uri)
        if not name:
            raise StorageError(f"{uri} names a bucket, not an object")
        return self._client.bucket(bucket).blob(name)

    def _wrap(self, error: Exception, action: str, uri: str, permission: str) -> StorageError:
        bucket, _ = parse_gs_uri(uri)
        if isinstance(error, gexc.Forbidden):
            return StorageError(
                f"{action} {uri}: permission {permission} denied on bucket {bucket} "
                f"({_server_message(error)}); grant it: {GRANT_HINT.format(bucket=bucket)}"
            )
        if isinstance(error, gexc.NotFound) and "bucket" in _server_message(error).lower():
            return StorageError(f"{action} {uri}: bucket {bucket} does not exist; create it: {CREATE_BUCKET_HINT.format(bucket=bucket)}")
        return StorageError(f"{action} {uri}: {error}")

    # --- single objects -------------------------------------------------------------------

    def exists(self, uri: str) -> bool:
        bucket, name = parse_gs_uri(uri)
        try:
            if name and self._blob(uri).exists(retry=self._retry):
                return True
            # A "directory": the local adapter answers True for one, so this one does too.
            prefix = f"{name}/" if name else ""
            page = self._client.list_blobs(bucket, prefix=prefix, max_results=1, retry=self._retry)
            return any(True for _ in page)
        except gexc.GoogleAPIError as e:
            raise self._wrap(e, "cannot check", uri, "storage.objects.list") from e

    def read_bytes(self, uri: str) -> bytes:
        try:
            return cast(bytes, self._blob(uri).download_as_bytes(retry=self._retry))
        except gexc.NotFound as e:
            raise StorageError(f"{uri} does not exist") from e
        except gexc.GoogleAPIError as e:
            raise self._wrap(e, "cannot read", uri, "storage.objects.get") from e

    def write_bytes(self, uri: str, data: bytes, *, if_absent: bool = False) -> bool:
        blob = self._blob(uri)
        if not if_absent:
            try:
                blob.upload_from_string(data, retry=self._retry)
            except gexc.GoogleAPIError as e:
                raise self._wrap(e, "cannot write", uri, "storage.objects.create") from e
            return True
        retried = threading.Event()
        # api_core's Retry has no public accessor for its predicate; wrap it to learn whether this
        # call was retried (needed to tell "my lost response" from "another writer won").
        retry = ConditionalRetryPolicy(
            self._retry.with_predicate(_note_retry(self._retry._predicate, retried)),
            is_generation_specified,
            ["query_params"],
        )
        try:
            blob.upload_from_string(data, if_generation_match=0, retry=retry)
            return True
        except gexc.PreconditionFailed:
            # A create whose response was lost and then retried finds its own object: that is a
            # win, not a lost race. Only a retried call can be in that position.
            return retried.is_set() and self._same_content(uri, data)
        except gexc.GoogleAPIError as e:
            raise self._wrap(e, "cannot write", uri, "storage.objects.create") from e

    def _same_content(self, uri: str, data: bytes) -> bool:
        try:
            return cast(bytes, self._blob(uri).download_as_bytes(retry=self._retry)) == data
        except gexc.NotFound:
            return False

    def append_bytes(self, uri: str, data: bytes) -> None:
        """GCS objects cannot grow, and rewriting one per append costs its whole size: the new bytes go
        up as a small object that the server composes onto the end (constant cost), guarded by the
        target's generation so a concurrent writer is detected, not overwritten."""
        bucket_name, name = parse_gs_uri(uri)
        bucket = self._client.bucket(bucket_name)
        target = bucket.get_blob(name, retry=self._retry)
        if target is None:
            if not self.write_bytes(uri, data, if_absent=True):
                raise StorageError(f"cannot append to {uri}: another writer created it at the same moment")
            return
        part = bucket.blob(f"{name}.append-{uuid.uuid4().hex}")
        size_before = target.size or 0
        try:
            part.upload_from_string(data, retry=self._retry)
            target.compose([target, part], if_generation_match=target.generation, retry=self._retry)
        except gexc.PreconditionFailed as e:
            # A retried compose whose first try succeeded (its response lost) finds the generation moved:
            # that is this append, if the object grew by exactly these bytes.
            if not self._ends_with(bucket, name, size_before, data):
                raise StorageError(f"cannot append to {uri}: it changed under this writer (another writer?)") from e
        except gexc.GoogleAPIError as e:
            raise self._wrap(e, "cannot append to", uri, "storage.objects.create") from e
        finally:
            try:
                part.delete(retry=self._retry)
            except gexc.GoogleAPIError:
                pass  # an orphaned part is harmless: readers read the target only

    def _ends_with(self, bucket: storage.Bucket, name: str, size_before: int, data: bytes) -> bool:
        now = bucket.get_blob(name, retry=self._retry)
        if now is None or (now.size or 0) != size_before + len(data):
            return False
        return cast(bytes, now.download_as_bytes(start=size_before, retry=self._retry)) == data

    def upload_file(self, local_path: str, uri: str) -> ObjectInfo:
        """One local file to one object (logs, the events file); streamed and retried."""
        blob = self._blob(uri)
        try:
            blob.upload_from_filename(local_path, retry=self._retry)
        except gexc.GoogleAPIError as e:
            raise self._wrap(e, "cannot upload to", uri, "storage.objects.create") from e
        return ObjectInfo(uri, blob.size or 0, _checksum(blob), blob.updated.timestamp() if blob.updated else None)

    def delete(self, uri: str) -> None:
        bucket, name = parse_gs_uri(uri)
        targets = [self._client.bucket(bucket).blob(name)] if name else []
        prefix = f"{name}/" if name else ""
        try:
            targets += list(self._client.list_blobs(bucket, prefix=prefix, retry=self._retry))
            for blob in targets:
                try:
                    # Deleting a name is idempotent for us (a 404 on the retry means it is gone),
                    # so retry unconditionally rather than with the library's conditional default.
                    blob.delete(retry=self._retry)
                except gexc.NotFound:
                    pass
        except gexc.GoogleAPIError as e:
            raise self._wrap(e, "cannot delete", uri, "storage.objects.delete") from e

    def list(self, prefix_uri: str, *, limit: int | None = None) -> list[ObjectInfo]:
        bucket, name = parse_gs_uri(prefix_uri)
        try:
            prefix = f"{name}/" if name else ""
            blobs = list(self._client.list_blobs(bucket, prefix=prefix, max_results=limit, retry=self._retry))
            if not blobs and name:
                single = self._client.bucket(bucket).get_blob(name, retry=self._retry)
                blobs = [single] if single is not None else []
        except gexc.NotFound:
            return []  # no bucket, no objects: the same answer the local adapter gives
        except gexc.GoogleAPIError as e:
            raise self._wrap(e, "cannot list", prefix_uri, "storage.objects.list") from e
        out = [
            ObjectInfo(self.uri(bucket, b.name), b.size or 0, _checksum(b), b.updated.timestamp() if b.updated else None)
            for b in blobs
            if not b.name.endswith("/")  # zero-byte "folder" placeholders some tools create
        ]
        return sorted(out, key=lambda o: o.uri)

    # --- directories ----------------------------------------------------------------------

    def upload_dir(self, local_dir: str, uri: str) -> builtins.list[ObjectInfo]:
        bucket_name, name = parse_gs_uri(uri)
        bucket = self._client.bucket(bucket_name)
        root = Path(local_dir)
        if not root.is_dir():
            raise StorageError(f"{local_dir} is not a directory")
        files = sorted(p for p in root.rglob("*") if p.is_file())
        pairs = [(str(p), bucket.blob(str(PurePosixPath(name, p.relative_to(root).as_posix())).lstrip("/"))) for p in files]
        results = transfer_manager.upload_many(
            pairs,
            # Filenames are opened and streamed by the library; without an explicit retry the
            # per-file upload would use the client default (120 s, no custom backoff).
            upload_kwargs={"retry": self._retry},
            worker_type=transfer_manager.THREAD,
            max_workers=self._settings.max_workers,
        )
        self._raise_for_failures(f"upload of {local_dir} to {uri}", bucket_name, [blob.name for _, blob in pairs], results)
        return sorted(
            (
                ObjectInfo(self.uri(bucket_name, b.name), b.size or 0, _checksum(b), b.updated.timestamp() if b.updated else None)
                for _, b in pairs
            ),
            key=lambda o: o.uri,
        )

    def _raise_for_failures(self, what: str, bucket_name: str, names: builtins.list[str], results: builtins.list[object]) -> None:
        """transfer_manager returns exceptions in place of results; turn any into one StorageError."""
        failures = [(name, r) for name, r in zip(names, results, strict=True) if isinstance(r, Exception)]
        if failures:
            first_name, first = failures[0]
            raise StorageError(
                f"{what} failed for {len(failures)} of {len(names)} objects; first: {self.uri(bucket_name, first_name)}: {first}"
            ) from first

    def download_dir(self, uri: str, local_dir: str) -> builtins.list[str]:
        bucket_name, name = parse_gs_uri(uri)
        prefix = f"{name}/" if name else ""
        try:
            blobs = [b for b in self._client.list_blobs(bucket_name, prefix=prefix, retry=self._retry) if not b.name.endswith("/")]
        except gexc.GoogleAPIError as e:
            raise self._wrap(e, "cannot list", uri, "storage.objects.list") from e
        if not blobs:
            raise StorageError(f"{uri} holds no objects")
        dest_root = Path(local_dir).resolve()
        pairs = []
        for blob in blobs:
            target = (dest_root / blob.name[len(prefix) :]).resolve()
            if dest_root not in target.parents:
                raise StorageError(f"object {self.uri(bucket_name, blob.name)} would land outside {local_dir}")
            target.parent.mkdir(parents=True, exist_ok=True)
            pairs.append((blob, str(target)))
        results = transfer_manager.download_many(
            pairs,
            download_kwargs={"retry": self._retry},
            worker_type=transfer_manager.THREAD,
            max_workers=self._settings.max_workers,
        )
        self._raise_for_failures(f"download of {uri}", bucket_name, [b.name for b, _ in pairs], results)
        return [path for _, path in pairs]

    # --- preflight ------------------------------------------------------------------------

    def check_writable(self, uri: str) -> None:
        bucket_name, name = parse_gs_uri(uri)
        probe_name = str(PurePosixPath(name, f"{PROBE_PREFIX}{uuid.uuid4().hex}")).lstrip("/")
        blob = self._client.bucket(bucket_name).blob(probe_name)
        try:
            blob.upload_from_string(b"rljob write probe", if_generation_match=0, retry=self._retry_if_precondition)
        except gexc.NotFound as e:
            raise StorageError(
                f"output location {uri}: bucket {bucket_name} does not exist; create it: {CREATE_BUCKET_HINT.format(bucket=bucket_name)}"
            ) from e
        except (gexc.Forbidden, gexc.Unauthorized) as e:
            raise StorageError(
                f"output location {uri} is not writable: permission storage.objects.create denied on bucket "
                f"{bucket_name} ({_server_message(e)}); grant the job's service account "
                f"roles/storage.objectAdmin: {GRANT_HINT.format(bucket=bucket_name)}"
            ) from e
        except gexc.GoogleAPIError as e:
            raise StorageError(f"output location {uri}: the write probe failed: {e}") from e
        try:
            blob.delete(retry=self._retry)
        except gexc.NotFound:
            pass
        except (gexc.Forbidden, gexc.Unauthorized) as e:
            # Orbax deletes temporary checkpoint directories and old steps: without delete a job
            # fails hours in, so it is refused now. A retention policy or object hold also lands here.
            raise StorageError(
                f"output location {uri} is not fully writable: permission storage.objects.delete denied on "
                f"bucket {bucket_name} ({_server_message(e)}); checkpointing needs it (grant "
                f"roles/storage.objectAdmin, or remove the bucket's retention policy); the probe object "
                f"{self.uri(bucket_name, probe_name)} was left behind"
            ) from e
        except gexc.GoogleAPIError as e:
            raise StorageError(f"output location {uri}: deleting the write probe failed: {e}") from e

    def check_readable(self, uri: str) -> None:
        """An input (model, tokenizer, data) is listable and not empty."""
        bucket_name, name = parse_gs_uri(uri)
        try:
            if name and self._client.bucket(bucket_name).get_blob(name, retry=self._retry) is not None:
                return
            found = list(self._client.list_blobs(bucket_name, prefix=f"{name}/" if name else "", max_results=1, retry=self._retry))
        except gexc.NotFound as e:
            raise StorageError(f"input {uri}: bucket {bucket_name} does not exist") from e
        except (gexc.Forbidden, gexc.Unauthorized) as e:
            raise StorageError(
                f"input {uri} is not readable: permission storage.objects.list/get denied on bucket "
                f"{bucket_name} ({_server_message(e)}); grant the job's service account roles/storage.objectViewer"
            ) from e
        if not found:
            raise StorageError(f"input {uri} does not exist (no object and no objects under it)")


def _note_retry(predicate: Callable[[Exception], bool], flag: threading.Event) -> Callable[[Exception], bool]:
    def wrapped(exc: Exception) -> bool:
        decision = predicate(exc)
        if decision:
            flag.set()
        return decision

    return wrapped


_lock = threading.Lock()
_store: GcsStore | None = None


def gcs_store() -> GcsStore:
    """The process's one GcsStore (and so one client and one connection pool)."""
    global _store
    with _lock:
        if _store is None:
            try:
                # With STORAGE_EMULATOR_HOST set the client talks to the emulator anonymously.
                client = storage.Client()
            except Exception as e:  # google.auth raises its own DefaultCredentialsError
                raise StorageError(
                    f"no Google Cloud credentials for gs:// access ({e}); on GKE bind the job's Kubernetes "
                    "service account with Workload Identity, elsewhere set GOOGLE_APPLICATION_CREDENTIALS"
                ) from e
            _store = GcsStore(client, RetrySettings.from_env())
        return _store


def reset_gcs_store() -> None:
    """Forget the process's store (tests that restart or swap the emulator)."""
    global _store
    with _lock:
        _store = None
