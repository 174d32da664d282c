"""Where the rollout's native kernels are built to and looked up (few_rows_matmul.py). Free of JAX so that what runs
the image's commands elsewhere (harness/podrun) can find the cache bootstrap filled without importing it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CACHE_VARIABLE = "RLJOB_NATIVE_CACHE"


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no HOME and no passwd entry (an arbitrary container uid)
            base = tempfile.gettempdir()
    return Path(base) / "rljob" / "native"
