"""The shape of the model a job trains, for the fit check.

Where it comes from, first found wins, in the order the trainer itself trusts them (hf_model.py): the
checkpoint's own `config.json` when it is a local directory this process can read; else `model.dims`
(the vocabulary then from the named model, or MaxText's Llama base); else MaxText's model table for
`model.name` (model_shapes.py). A hub id or gs:// source is not fetched at submit: its named model or dims
stand in, as when `trainer plan` runs offline.

Pure but for `read_local_model_config`, which reads one small JSON file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from trainer.contract.spec.locations import local_path, location_kind

from .hf_config_fields import UnsupportedCheckpoint
from .hf_families import read_checkpoint_config
from .model_shapes import MAXTEXT_MODELS, ModelShape, shape_from_dims

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; anything larger is not one


def read_local_model_config(source: str) -> dict[str, Any] | None:
    """`<source>/config.json` when `source` is a local directory holding a readable one (a regular file, not a link),
    else None."""
    if location_kind(source) != "local":
        return None
    path = Path(local_path(source)) / "config.json"
    try:
        # Not through a link: submit's refusals quote config values, and a link could point past the team's locations.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CONFIG_BYTES:
                return None
            data = json.loads(f.read(MAX_CONFIG_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError):
        return None  # unreadable here: the named model or dims stand in; the trainer reads it again
    return data if isinstance(data, dict) else None


def model_shape(name: str | None, dims: dict[str, int] | None, hf_config: dict[str, Any] | None) -> ModelShape | None:
    """The shape of a spec's model, or None when nothing says it (an unknown name, no dims, no config)."""
    if hf_config is not None:
        try:
            return read_checkpoint_config(hf_config)[0]
        except UnsupportedCheckpoint:
            pass  # refused at submit and by the trainer, with the reason; the estimate falls back to dims or the name
    if dims:
        return shape_from_dims(name, dims)
    return MAXTEXT_MODELS.get(name) if name else None
