"""ManifestWorker: parses a large manifest.json and reduces it to the job's artifact sizes in a process of its own.

A manifest within the service's bounds is up to 64 MiB and 2,000,000 JSON values. json.loads of one near the bound
took about 0.5 s, and counting the values of a 64 MiB one about 0.1 s, and the service's interpreter lock was held
throughout, so every other request (any team's) waited through it: bench/control_plane/hostile_load.py saw another team's p95 at
x10-x27 of its value at rest in the cases that end a job with such a manifest. Here the bytes go to a worker
process of their own (spawned, not forked: the service has threads), which counts and parses them and answers with
manifest_sizes.ManifestSizes (a few hundred bytes) or ManifestRefused; the service's lock is held only to copy the
bytes into the pipe. A small manifest (a real run's is a few KiB to a few MiB) is handled in place: a process round
trip would cost more than the parse.

A worker that dies (the kernel's OOM killer, a crash) or takes longer than `timeout_s` is replaced and the manifest is
answered as unreadable (the job's artifacts keep what its events said, as for any unreadable manifest); the next
manifest gets a fresh worker. The worker's memory counts against the pod's limit with the service's: both stay far
under it (bench/control_plane/hostile_load.py samples the service and its children).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import threading
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

from service.domain.records.manifest_sizes import ManifestSizes, size_manifest
from service.domain.records.models import ManifestRefused

log = logging.getLogger(__name__)

INLINE_PARSE_BYTES = 1024 * 1024  # parsed in the service: about 10 ms of json.loads
WORKER_TIMEOUT_S = 120.0  # a near-bound manifest takes about 1 s; far past that the worker is stuck
# At most this many JSON values (keys included; manifest_values counts an upper bound): a real manifest makes 9 per
# file (a dict of 4 keys and 4 values), so this takes 200,000 files, about 130 MB parsed at most.
MAX_MANIFEST_VALUES = 2_000_000


def manifest_values(data: bytes) -> int:
    """An upper bound on the JSON values (object keys included) json.loads would make from `data`, without parsing:
    each element of an array and each member of an object follows a comma or opens its container, and a member is
    two values. Commas inside strings count too, so the bound only errs high."""
    return 2 * (data.count(b",") + data.count(b"[") + data.count(b"{")) + 1


def manifest_sizes_of(data: bytes, job_id: str, artifact_uris: Mapping[str, str]) -> ManifestSizes | ManifestRefused | str:
    """Size the artifacts from `data`; ManifestRefused for one with more values than the service parses (counted in
    the bytes first: 64 MiB of `{},` parsed is 1.7 GB); a str says why there is nothing (not JSON, not this job's)."""
    values = manifest_values(data)
    if values > MAX_MANIFEST_VALUES:
        return ManifestRefused(
            f"manifest.json would make up to {values} JSON values, over the "
            f"{MAX_MANIFEST_VALUES} the service parses; its artifacts are not sized"
        )
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError) as e:
        return f"not JSON: {e}"
    if not isinstance(manifest, dict) or manifest.get("job_id") != job_id:
        return "not this job's manifest"
    return size_manifest(manifest, artifact_uris)


class ManifestWorker:
    def __init__(self, *, inline_bytes: int = INLINE_PARSE_BYTES, timeout_s: float = WORKER_TIMEOUT_S) -> None:
        self.inline_bytes = inline_bytes
        self.timeout_s = timeout_s
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()  # one manifest at a time: job ends are rare, and one worker is enough memory

    def sizes(self, data: bytes, job_id: str, artifact_uris: Mapping[str, str]) -> ManifestSizes | ManifestRefused | str:
        if len(data) <= self.inline_bytes:
            return manifest_sizes_of(data, job_id, artifact_uris)
        with self._lock:
            if self._pool is None:
                # One manifest a worker: parsing a near-bound one leaves ~300 MiB in the worker's allocator, which a
                # worker that lived on would hold for good; a spawn (about 1 s) per manifest over 1 MiB is cheap.
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"), max_tasks_per_child=1)
            # Looked up at the call, so a test can hand the worker a task that dies or hangs.
            future = self._pool.submit(manifest_sizes_of, data, job_id, dict(artifact_uris))
            try:
                return future.result(timeout=self.timeout_s)
            except (BrokenProcessPool, FutureTimeout) as e:
                self._discard_pool()
                why = f"took longer than {self.timeout_s:.0f} s" if isinstance(e, FutureTimeout) else "died"
                log.warning("job %s: the manifest worker %s; a new one takes the next manifest", job_id, why)
                return f"the manifest worker {why}"

    def close(self) -> None:
        with self._lock:
            self._discard_pool()

    def _discard_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # A stuck worker would outlive shutdown(); Python 3.14 has pool.kill_workers() for this, 3.12 only the table.
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
