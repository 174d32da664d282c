"""Where the installed MaxText keeps its YAML configs, found without importing MaxText (slow, JAX)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path


@functools.cache
def maxtext_configs_dir() -> Path:
    spec = importlib.util.find_spec("maxtext")
    if spec is None or spec.origin is None:
        # The plan still renders on a machine without MaxText (the service); paths then use the
        # tutorial's spelling, which MaxText itself resolves against its installed configs.
        return Path("src/maxtext/configs")
    return Path(spec.origin).parent / "configs"


def base_config() -> str:
    return str(maxtext_configs_dir() / "base.yml")


def rl_config() -> str:
    return str(maxtext_configs_dir() / "post_train" / "rl.yml")
