"""JAX's persistent compilation cache for a run: every process of the job (each stage's MaxText, the evaluation engine)
finds the programs an earlier job of the same shape compiled, instead of spending its first step compiling them
(most of a v5e job's first step: `compile_s` in bench/results/tpu_grpo.json).

Where: `<spec.output>/_cache/jax` by default, beside the conversion cache (`_cache/maxtext`), so every job and eval job
writing under one output shares it; $RLJOB_JAX_CACHE names another root, "off" turns it off. The key is JAX's own
(the program, its compile options, the JAX, jaxlib and libtpu versions, the devices), so nothing a spec says picks an
entry; one directory holds every shape.

Trust: JAX runs what its cache holds, so the cache is written only by what may already run code in the job. It lives
with the run's outputs (the team's storage); the reward sandbox's workers cannot write it where they run as another
user (a root trainer's uid-65532 workers: the local root is made 0700) or have no network (gs://); where they run as
the trainer's own user without Landlock they can write every file of the trainer, this cache included
(docs/reward-sandbox.md).

Writes: on a local filesystem JAX locks its cache only when it has a size bound (jax/_src/lru_cache.py, JAX 0.11.1:
`eviction_enabled`), and without the lock a reader of another process can meet a half-written entry; so a local cache
gets a bound (LOCAL_MAX_BYTES, least recently used entries evicted). On gs:// an object appears whole once written,
and JAX's lock there is no lock: its SoftFileLock takes the gs:// path as a local one (a `gs:/BUCKET/...` directory in
the working directory, measured), so there the cache has no bound and takes none.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.contract import JobSpec, join_uri, local_path, location_kind

CACHE_ROOT_ENV = "RLJOB_JAX_CACHE"
DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
MAX_SIZE_ENV = "JAX_COMPILATION_CACHE_MAX_SIZE"
LOCAL_MAX_BYTES = 8 << 30  # a bound for JAX's lock more than a budget: past it, least recently used entries go first


def cache_root(spec: JobSpec) -> str | None:
    """$RLJOB_JAX_CACHE, else `<spec.output>/_cache/jax` (a local one as a plain path, as JAX takes it); None when
    "off". ValueError for a root that is neither gs:// nor an absolute path."""
    root = os.environ.get(CACHE_ROOT_ENV) or join_uri(spec.output, "_cache", "jax")
    if root == "off":
        return None
    kind = location_kind(root)
    if kind == "hub":
        raise ValueError(f"{CACHE_ROOT_ENV}={root!r}: give gs://BUCKET/PATH, an absolute path or off")
    return root.rstrip("/") if kind == "gcs" else local_path(root).rstrip("/")


def cache_env(spec: JobSpec) -> dict[str, str]:
    """The variables that give every JAX process of the job the cache (empty: off, or this process's environment
    already names one, which is kept: a machine's operator may point JAX at a faster disk)."""
    root = cache_root(spec)
    if root is None or os.environ.get(DIR_ENV):
        return {}
    if location_kind(root) != "gcs":
        return {DIR_ENV: root, MAX_SIZE_ENV: str(LOCAL_MAX_BYTES)}
    return {DIR_ENV: root}


def use_compile_cache(spec: JobSpec) -> str | None:
    """Set the cache in this process's environment, before JAX's first compilation here (the evaluation engine) and
    before any stage process starts (they inherit it); a local root is created 0700. Returns the root in use."""
    env = cache_env(spec)
    if env and location_kind(env[DIR_ENV]) != "gcs":
        path = Path(env[DIR_ENV])
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)
    os.environ.update(env)
    return os.environ.get(DIR_ENV)
