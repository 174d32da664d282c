"""What every part of the job spec is built on: the strict pydantic base and the location checks.

A location is a URI (locations.py): `gs://bucket/path`, an absolute local path (or `file://`), or, where allowed, a
Hugging Face Hub id `org/name`.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, ValidationInfo

from trainer.contract.accelerators.tpu import (
    TPU_SLICES,
)
from trainer.contract.spec import values as limits
from trainer.contract.spec.locations import local_path

HUB_ID_RE = re.compile(limits.HUB_ID_PATTERN)
GCS_URI_RE = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?")
LABEL_VALUE_RE = re.compile(limits.LABEL_VALUE_PATTERN)
MAX_ROLLOUT_PARALLELISM = max(s.chips for s in TPU_SLICES.values())


# The validation context a stored spec is read back with (service/adapters/store/record_rows.py): a refusal added
# after a spec was stored applies to new submissions, and the stored job stays readable with what it asked for.
STORED_SPEC_CONTEXT = {"stored": True}


def stored_spec(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get("stored"))


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN, Infinity (and 1e309, which JSON parsers read as infinity) are refused
    # for every float field at once; MaxText cannot train with them and JSON cannot store them.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _check_location(value: str, *, hub_allowed: bool) -> str:
    if value.startswith("gs://"):
        if not GCS_URI_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid gs://bucket/path URI")
        return value.rstrip("/") if value.count("/") > 2 else value
    value = local_path(value)
    if value.startswith("/"):
        return value.rstrip("/") or "/"
    if hub_allowed and HUB_ID_RE.fullmatch(value):
        return value
    allowed = "a Hugging Face Hub id (org/name), " if hub_allowed else ""
    raise ValueError(f"{value!r} must be {allowed}an absolute local path or a gs:// URI")


def _check_file(value: str, suffix: str) -> str:
    loc = _check_location(value, hub_allowed=False)
    if not loc.endswith(suffix):
        raise ValueError(f"must name a {suffix} file")
    return loc
