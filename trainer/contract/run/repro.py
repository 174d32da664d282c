"""repro.json: what produced a run, written by the trainer before training and served by the service.

The record holds only facts that decide the outcome (spec after defaults, image, package versions, seeds,
content hashes of the inputs, hardware), never a time or a host name, so two runs of the same spec on the
same image have equal records but for the job id: `rljob diff` compares them field by field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

REPRO_FILE = "repro.json"
REPRO_SCHEMA_VERSION = 1
# Distribution names (importlib.metadata), keyed by the name the record shows.
REPRO_PACKAGES = {
    "rljob": "rljob",
    "maxtext": "maxtext",
    "tunix": "google-tunix",
    "jax": "jax",
    "jaxlib": "jaxlib",
    "flax": "flax",
    "orbax": "orbax-checkpoint",
    "transformers": "transformers",
}


class _Record(BaseModel):
    # extra="ignore": a newer trainer's fields do not make an older service refuse the whole record.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Seed(_Record):
    value: int | None = Field(description="the seed; null where the stage leaves it to the library's own default")
    source: str = Field(description="where the value comes from (the MaxText config key and file, or why none)")


class ContentHash(_Record):
    uri: str
    sha256: str | None = Field(description="hex digest of the content; null when it could not be read")
    files: int | None = Field(default=None, description="for a directory: the files hashed")
    error: str | None = Field(default=None, description="why there is no hash")


class ModelSource(_Record):
    uri: str = Field(description="spec.model.source")
    kind: Literal["hub", "local", "gcs"]
    revision: str | None = Field(description="spec.model.revision for a hub id; null: the hub's default branch at run time")
    content: ContentHash | None = Field(
        description="for a directory: sha256 over its files' relative names and their sha256; null for a hub id"
    )


class Image(_Record):
    reference: str | None = Field(description="the trainer image as the launcher named it (RLJOB_TRAINER_IMAGE); null outside a container")
    digest: str | None = Field(description="sha256:... when the reference pins one")


class Hardware(_Record):
    accelerator: str
    chips_per_vm: int
    capacity: str
    rollout_engine: str
    mesh: dict[str, int] = Field(description="the parallelism train_rl is given (rollout data and tensor parallelism)")


class ReproRecord(_Record):
    schema_version: int = REPRO_SCHEMA_VERSION
    job_id: str
    spec: dict[str, Any] = Field(description="the resolved spec (defaults filled), as the trainer ran it")
    image: Image
    versions: dict[str, str | None] = Field(
        description="installed versions of rljob, maxtext, tunix, jax, ..., python; null: not installed"
    )
    seeds: dict[str, Seed] = Field(description="data_shuffle, init_weights, sampling")
    data: list[ContentHash] = Field(description="the train and eval files (spec.dataset), in spec order")
    model: ModelSource
    reward_functions: ContentHash | None = Field(description="spec.grpo.rewards.functions_path; null: MaxText's built-in rewards only")
    reward_files: ContentHash | None = Field(
        default=None,
        description="the reward file and the Python beside it that it may import (the set a worker is given: "
        "trainer/rewards_sandbox/reward_files.py), sha256 over each one's relative name and sha256, with their count; "
        "a changed helper module moves it where reward_functions (the file alone) stays; null without a reward file, "
        "or in a record written before it",
    )
    hardware: Hardware
