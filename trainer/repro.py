"""Builds and writes a job's repro.json (trainer/contract/run/repro.py) before its first stage.

Called by the pipeline on every attempt: the record is rewritten, so it describes the image and packages of the
attempt that last ran. Nothing here imports an ML framework: versions come from importlib.metadata and the
MaxText seeds from its YAML configs, read as data.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from trainer.contract import JobSpec, RunLayout, local_path, location_kind
from trainer.contract.run.repro import REPRO_PACKAGES, ContentHash, Hardware, Image, ModelSource, ReproRecord, Seed
from trainer.contract.spec.hardware import capacity_text
from trainer.contract.spec.rl_settings import DEFAULT_SEED
from trainer.rewards_sandbox.reward_files import RewardFilesRefused, local_reward_files
from trainer.runner import secret_values
from trainer.stages.maxtext_paths import maxtext_configs_dir
from trainer.stages.reward_inputs import listed_reward_files
from trainer.storage import StorageError, store_for

IMAGE_ENV = "RLJOB_TRAINER_IMAGE"  # set by the Kubernetes launcher (service/adapters/k8s/pod_template.py)
CHUNK_BYTES = 1 << 20
REDACTED = "<redacted>"


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for shown, distribution in REPRO_PACKAGES.items():
        try:
            versions[shown] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            versions[shown] = None
    versions["python"] = platform.python_version()
    return versions


def image_from_env(environ: Mapping[str, str]) -> Image:
    reference = environ.get(IMAGE_ENV) or None
    digest = reference.partition("@")[2] or None if reference else None
    return Image(reference=reference, digest=digest)


def _maxtext_setting(key: str) -> tuple[Any, str]:
    """train_rl's value of a MaxText config key: rl.yml (the config the train stage passes) over base.yml.
    The train stage sets a seed on its command line only from the spec (seed, dataset.shuffle_seed); else these are the values."""
    configs = maxtext_configs_dir()
    for name in ("post_train/rl.yml", "base.yml"):
        path = configs / name
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(loaded, dict) and key in loaded:
            return loaded[key], f"MaxText {name}: {key}"
    return None, f"MaxText's {key} (MaxText's configs not found at {configs})"


def seeds_used(spec: JobSpec) -> dict[str, Seed]:
    seeds = {}
    for shown, key in (("data_shuffle", "data_shuffle_seed"), ("init_weights", "init_weights_seed")):
        value, source = _maxtext_setting(key)
        seeds[shown] = Seed(value=value if isinstance(value, int) else None, source=source)
    # The train stage's command line (trainer/stages/train.py rl_settings_args, rollout_seed) over MaxText's YAML.
    if spec.seed is not None:
        seeds["data_shuffle"] = Seed(value=spec.seed, source="spec seed: data_shuffle_seed")
        seeds["init_weights"] = Seed(value=spec.seed, source="spec seed: init_weights_seed")
    if spec.dataset.shuffle_seed is not None:
        seeds["data_shuffle"] = Seed(value=spec.dataset.shuffle_seed, source="spec dataset.shuffle_seed: data_shuffle_seed")
    if spec.hardware.rollout_engine == "jax":
        seed, source = (DEFAULT_SEED, "default") if spec.seed is None else (spec.seed, "spec seed")
        seeds["sampling"] = Seed(value=seed, source=f"{source}: each rollout's key folds in the global step and the call")
    else:  # train_rl gives vLLM no seed: it draws from its engine's generator
        seeds["sampling"] = Seed(value=None, source="not set: train_rl gives the vllm rollout no seed (vLLM's own generator)")
    return seeds


def _sha256_local(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def file_hash(uri: str) -> ContentHash:
    try:
        if location_kind(uri) == "local":
            return ContentHash(uri=uri, sha256=_sha256_local(Path(local_path(uri))))
        return ContentHash(uri=uri, sha256=hashlib.sha256(store_for(uri).read_bytes(uri)).hexdigest())
    except (OSError, StorageError) as e:
        return ContentHash(uri=uri, sha256=None, error=str(e)[:500])


def directory_hash(uri: str) -> ContentHash:
    """sha256 over "<relative name>\\0<file digest>\\n" in name order. A gs:// directory's files are not
    downloaded for this: their digest is the checksum GCS keeps (md5 or crc32c), read from the listing."""
    lines: list[str] = []
    try:
        if location_kind(uri) == "local":
            root = Path(local_path(uri))
            if not root.is_dir():
                return ContentHash(uri=uri, sha256=None, error=f"{uri} is not a directory")
            for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
                lines.append(f"{path.relative_to(root).as_posix()}\0sha256:{_sha256_local(path)}\n")
        else:
            prefix = uri.rstrip("/") + "/"
            for obj in store_for(uri).list(uri):
                lines.append(f"{obj.uri.removeprefix(prefix)}\0{obj.checksum or f'size:{obj.size_bytes}'}\n")
    except (OSError, StorageError) as e:
        return ContentHash(uri=uri, sha256=None, error=str(e)[:500])
    return ContentHash(uri=uri, sha256=hashlib.sha256("".join(lines).encode()).hexdigest(), files=len(lines))


def reward_files_hash(uri: str) -> ContentHash:
    """sha256 over "<relative name>\\0sha256:<digest>\\n" in name order, for the files a reward's worker is given: the
    reward file and the Python beside it that it may import (reward_files.py's rule and bounds). A gs:// set is read
    whole: it is at most a reward's 8 MiB."""
    lines: list[str] = []
    try:
        if location_kind(uri) == "local":
            path = Path(local_path(uri))
            for name in local_reward_files(str(path)):
                lines.append(f"{name}\0sha256:{_sha256_local(path.parent / name)}\n")
        else:
            store = store_for(uri)
            parent, names = listed_reward_files(store, uri)
            for name in names:
                lines.append(f"{name}\0sha256:{hashlib.sha256(store.read_bytes(f'{parent}/{name}')).hexdigest()}\n")
    except (OSError, StorageError, RewardFilesRefused) as e:
        return ContentHash(uri=uri, sha256=None, error=str(e)[:500])
    return ContentHash(uri=uri, sha256=hashlib.sha256("".join(lines).encode()).hexdigest(), files=len(lines))


def model_source(spec: JobSpec) -> ModelSource:
    source = spec.model.source
    kind = location_kind(source)
    if kind == "hub":
        return ModelSource(uri=source, kind=kind, revision=spec.model.revision, content=None)
    return ModelSource(uri=source, kind=kind, revision=None, content=directory_hash(source))


def build_repro_record(spec: JobSpec, job_id: str, environ: Mapping[str, str]) -> ReproRecord:
    hw = spec.hardware
    rewards = spec.grpo.rewards.functions_path
    return ReproRecord(
        job_id=job_id,
        spec=spec.model_dump(mode="json"),
        image=image_from_env(environ),
        versions=package_versions(),
        seeds=seeds_used(spec),
        data=[file_hash(uri) for uri in [*spec.dataset.train_files, *spec.dataset.eval_files]],
        model=model_source(spec),
        reward_functions=file_hash(rewards) if rewards else None,
        reward_files=reward_files_hash(rewards) if rewards else None,
        hardware=Hardware(
            accelerator=hw.accelerator,
            chips_per_vm=hw.chips_per_vm,
            capacity=capacity_text(hw.capacities),
            rollout_engine=hw.rollout_engine,
            mesh={"rollout_data_parallelism": hw.rollout_data_parallelism, "rollout_tensor_parallelism": hw.rollout_tensor_parallelism},
        ),
    )


def repro_json(record: ReproRecord, secrets: list[str]) -> bytes:
    """The record as written. The spec has no secret field, but a label or path could hold a token's
    value by mistake: any environment secret (HF_TOKEN, ...) found in the text is replaced."""
    text = json.dumps(record.model_dump(mode="json"), sort_keys=True, indent=2)
    for secret in secrets:
        text = text.replace(json.dumps(secret)[1:-1], REDACTED)
    return text.encode()


def write_repro(spec: JobSpec, layout: RunLayout, environ: Mapping[str, str] | None = None) -> ReproRecord:
    env = os.environ if environ is None else environ
    record = build_repro_record(spec, layout.job_id, env)
    store_for(layout.root).write_bytes(layout.repro, repro_json(record, secret_values(env)))
    return record
