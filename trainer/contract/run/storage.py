"""How many bytes a run directory holds, by part: the `storage` progress event's body.

The trainer measures its run directory at each stage's end (trainer/run_size.py) and the service
shows the newest measurement as `storage` in `GET /v1/jobs/{id}`. Parts follow the run layout
(layout.py); what no part names is `other`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

CHECKPOINTS = "checkpoints"  # rl/<job-id>/checkpoints/: Orbax's actor checkpoints (what retention bounds)
CONVERTED = "converted"  # maxtext/: to_maxtext's checkpoint (absent when served from the conversion cache)
EXPORT = "export"  # hf/: the Hugging Face export
LOGS = "logs"  # logs/, events.jsonl, rl/<job-id>/tensorboard/
SAMPLES = "samples"  # samples/ and eval/: completions, rewards and evaluation rows
DATA = "data"  # data/: the dataset materialised as parquet
OTHER = "other"  # spec.json, manifest.json, stage markers, anything else
STORAGE_PARTS: tuple[str, ...] = (CHECKPOINTS, CONVERTED, EXPORT, LOGS, SAMPLES, DATA, OTHER)

_TOP_LEVEL = {"maxtext": CONVERTED, "hf": EXPORT, "logs": LOGS, "events.jsonl": LOGS, "samples": SAMPLES, "eval": SAMPLES, "data": DATA}
_IN_RL_RUN = {"checkpoints": CHECKPOINTS, "tensorboard": LOGS}


def storage_part(relative_path: str) -> str:
    """The part a file belongs to, from its path relative to the run directory (`/`-separated)."""
    names = relative_path.strip("/").split("/")
    if names[0] == "rl" and len(names) > 3:  # rl/<job-id>/<checkpoints|tensorboard>/...
        return _IN_RL_RUN.get(names[2], OTHER)
    if len(names) == 1 and names[0] != "events.jsonl":
        return OTHER  # a file at the top: spec.json, manifest.json
    return _TOP_LEVEL.get(names[0], OTHER)


class RunStorage(BaseModel):
    """Bytes of the regular files under a run directory (symlinks not followed), total and by part."""

    model_config = ConfigDict(extra="forbid")

    total_bytes: int = Field(ge=0)
    parts: dict[str, int] = Field(description="bytes by part: " + ", ".join(STORAGE_PARTS))
    files: int = Field(ge=0)
    complete: bool = Field(default=True, description="false when the walk stopped at its bound (the sizes are a lower bound)")

    @classmethod
    def of_files(cls, sizes: list[tuple[str, int]], *, complete: bool = True) -> RunStorage:
        """From (path relative to the run directory, bytes) pairs."""
        parts = dict.fromkeys(STORAGE_PARTS, 0)
        for relative, size in sizes:
            parts[storage_part(relative)] += size
        return cls(total_bytes=sum(parts.values()), parts=parts, files=len(sizes), complete=complete)
