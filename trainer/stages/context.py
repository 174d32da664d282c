"""What every stage runner gets (JobContext) and the run-directory facts more than one stage reads."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.contract import JobSpec, RunLayout, local_path, location_kind
from trainer.progress.event_reporter import EventReporter
from trainer.run_stop import StopRequest
from trainer.runner import StartedStage, start_stage_command
from trainer.sizing.hf_model import MaxTextModel
from trainer.sources import stage_directory
from trainer.stages.reward_inputs import listed_reward_files
from trainer.storage import store_for

RunCommand = Callable[..., None]
StartCommand = Callable[..., StartedStage]


@dataclass(frozen=True)
class JobContext:
    spec: JobSpec
    layout: RunLayout
    work_dir: Path  # local scratch: the run dir itself for local output, else a per-job temp dir
    reporter: EventReporter
    run_command: RunCommand
    model: MaxTextModel  # resolved once from the checkpoint's config.json, before any stage
    stop: StopRequest = field(default_factory=StopRequest)  # a stop signal or the deadline, read between stages
    start_command: StartCommand = start_stage_command  # a process followed later: the export check


def local_work_dir(layout: RunLayout) -> Path:
    if location_kind(layout.root) == "local":
        return Path(local_path(layout.root))
    base = Path(os.environ.get("RLJOB_WORK_DIR", "/tmp/rljob-work"))
    return base / layout.job_id


def latest_actor_step(layout: RunLayout) -> int | None:
    steps = set()
    prefix = layout.actor_checkpoints.rstrip("/") + "/"
    for obj in store_for(layout.actor_checkpoints).list(layout.actor_checkpoints):
        head = obj.uri[len(prefix) :].split("/", 1)
        if len(head) == 2 and head[0].isdigit() and head[1].startswith("model_params/"):
            steps.add(int(head[0]))
    return max(steps) if steps else None


def stage_inputs(ctx: JobContext) -> dict[str, Any]:
    """Local paths for inputs MaxText cannot read from gs:// itself."""
    spec, work = ctx.spec, ctx.work_dir
    inputs: dict[str, Any] = {
        "local_source": None,
        "local_tokenizer": None,
        "local_rewards": None,
        "local_template": None,
        "local_processor": None,
    }
    if location_kind(spec.model.source) == "gcs":
        inputs["local_source"] = stage_directory(spec.model.source, work / "inputs" / "hf-source")
    if location_kind(spec.model.tokenizer_location) == "gcs":
        inputs["local_tokenizer"] = stage_directory(spec.model.tokenizer_location, work / "inputs" / "tokenizer")
    elif location_kind(spec.model.tokenizer_location) == "local":
        inputs["local_tokenizer"] = spec.model.tokenizer_location
    rewards = spec.grpo.rewards.functions_path
    if rewards and location_kind(rewards) == "gcs":
        inputs["local_rewards"] = _stage_reward_files(rewards, work / "inputs" / "rewards")
    template = spec.dataset.prompt_template
    if template and location_kind(template) == "gcs":
        inputs["local_template"] = _stage_file(template, work / "inputs" / "template")
    processor = spec.dataset.processor_path
    if processor and location_kind(processor) == "gcs":
        inputs["local_processor"] = _stage_file(processor, work / "inputs" / "processor")
    return inputs


def _stage_reward_files(uri: str, directory: Path) -> str:
    """Local copies of a gs:// reward file and the Python beside it that it may import (the rule and its bounds:
    trainer/rewards_sandbox/reward_files.py), so the train stage imports what the same file would import locally."""
    store = store_for(uri)
    parent, names = listed_reward_files(store, uri)
    for relative in names:
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.read_bytes(f"{parent}/{relative}"))
    return str(directory / uri.rsplit("/", 1)[1])


def _stage_file(uri: str, directory: Path) -> str:
    """A local copy of one gs:// file, for MaxText arguments that name a local path."""
    target = directory / Path(uri).name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(store_for(uri).read_bytes(uri))
    return str(target)
