"""Brings the job's inputs to where MaxText reads them: local copies of gs:// sources, parquet data.

MaxText reads local parquet through `hf_train_files`; JSON lines, JSON and gs:// files are
converted once into the run's work directory. Hub ids are left for MaxText to resolve itself.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.contract import JobSpec, join_uri, local_path, location_kind
from trainer.sizing.hf_model import MaxTextModel, UnsupportedCheckpoint, resolve_maxtext_model
from trainer.storage import StorageError, store_for

if TYPE_CHECKING:
    import pyarrow as pa

REQUIRED_COLUMNS = ("question", "answer")


class DataError(Exception):
    """A dataset file exists but is not GSM8K-format data; the message names the file and the fix."""


def local_copy_path(uri: str, dest: Path) -> str:
    """Where stage_directory(uri, dest) puts `uri`'s files, known before they exist."""
    return local_path(uri) if location_kind(uri) == "local" else str(dest)


def stage_directory(uri: str, dest: Path) -> str:
    """A local directory holding `uri`'s files: the path itself when local, else a downloaded copy."""
    if location_kind(uri) == "local":
        return local_copy_path(uri, dest)
    if not (dest / ".complete").exists():
        store_for(uri).download_dir(uri, str(dest))
        (dest / ".complete").write_text(uri)
    return str(dest)


def _read_table(uri: str) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = store_for(uri).read_bytes(uri)
    if uri.endswith(".parquet"):
        return pq.read_table(io.BytesIO(data))
    text = data.decode("utf-8")
    if uri.endswith(".jsonl"):
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        loaded = json.loads(text)
        rows = loaded if isinstance(loaded, list) else loaded.get("data", [])
    return pa.Table.from_pylist(rows)


def materialise_split(files: list[str], out_file: Path) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for uri in files:
        try:
            table = _read_table(uri)
        except (ValueError, UnicodeDecodeError, pa.ArrowInvalid) as e:
            raise DataError(f"{uri} is not readable as {uri.rsplit('.', 1)[-1]}: {e}") from e
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise DataError(f"{uri} lacks column(s) {missing}; GSM8K-format rows need 'question' and 'answer'")
        tables.append(table.select(list(REQUIRED_COLUMNS)).cast(pa.schema([(c, pa.string()) for c in REQUIRED_COLUMNS])))
    out_file.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(tables), str(out_file))
    return str(out_file)


def materialise_dataset(spec: JobSpec, data_dir: Path) -> tuple[str, str | None] | None:
    """(train parquet, eval parquet or None) under data_dir, or None for a hub dataset."""
    if not spec.dataset.uses_files:
        return None
    train = materialise_split(spec.dataset.train_files, data_dir / "train.parquet")
    evaluation = None
    if spec.dataset.eval_files:
        evaluation = materialise_split(spec.dataset.eval_files, data_dir / "eval.parquet")
    return train, evaluation


TEMPLATE_FIELDS = {
    "SYSTEM_PROMPT": ("reasoning_start_token", "reasoning_end_token", "solution_start_token", "solution_end_token"),
    "TEMPLATE": ("system_prompt", "question"),
}


def check_prompt_template(uri: str) -> None:
    """A prompt template MaxText can use: both strings present, formatting only the fields MaxText
    fills (utils_rl.format_maxtext_messages). Raises DataError naming the problem."""
    try:
        template = json.loads(store_for(uri).read_bytes(uri))
    except ValueError as e:
        raise DataError(f"{uri} is not JSON: {e}") from e
    if not isinstance(template, dict):
        raise DataError(f"{uri} must be a JSON object with SYSTEM_PROMPT and TEMPLATE")
    for key, fields in TEMPLATE_FIELDS.items():
        if not isinstance(template.get(key), str):
            raise DataError(f"{uri}: {key} must be a string")
        try:
            template[key].format(**{name: "" for name in fields})
        except (KeyError, IndexError, ValueError) as e:
            raise DataError(f"{uri}: {key} may use only {{{'}, {'.join(fields)}}} (double other braces): {e!r}") from e


def read_hf_config(spec: JobSpec, *, allow_hub: bool) -> dict[str, Any] | None:
    """The checkpoint's config.json, or None where it cannot be read (a hub id when `allow_hub` is
    False, or the hub unreachable: the convert stage then reports the real error)."""
    source = spec.model.source
    if location_kind(source) == "hub":
        if not allow_hub:
            return None
        try:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(source, "config.json", revision=spec.model.revision, token=os.environ.get("HF_TOKEN") or None)
        except Exception as e:  # noqa: BLE001 - offline, gated or missing: fall back to model.name
            print(
                f"rljob: cannot read config.json of {source} from the hub ({type(e).__name__}); using MaxText's table for model.name",
                file=sys.stderr,
            )
            return None
        hub_config = json.loads(Path(path).read_text())
        if not isinstance(hub_config, dict):
            raise UnsupportedCheckpoint("model.source", f"config.json of {source} is not a JSON object")
        return hub_config
    uri = join_uri(local_path(source), "config.json") if location_kind(source) == "local" else join_uri(source, "config.json")
    store = store_for(uri)
    if not store.exists(uri):
        raise UnsupportedCheckpoint("model.source", f"{uri} does not exist; a Hugging Face checkpoint directory has one")
    try:
        config = json.loads(store.read_bytes(uri))
    except ValueError as e:
        raise UnsupportedCheckpoint("model.source", f"{uri} is not JSON: {e}") from e
    if not isinstance(config, dict):
        raise UnsupportedCheckpoint("model.source", f"{uri} is not a JSON object")
    return config


def resolve_model(spec: JobSpec, *, allow_hub: bool = True) -> MaxTextModel:
    """What every stage tells MaxText about this checkpoint; raises UnsupportedCheckpoint."""
    dims = spec.model.dims.model_dump() if spec.model.dims else None
    return resolve_maxtext_model(spec.model.name, dims, read_hf_config(spec, allow_hub=allow_hub))


def checkpoint_problem(error: UnsupportedCheckpoint) -> tuple[str, str]:
    """(field, reason) for a spec problem report: config.json fields are reported under model.source."""
    return error.spec_problem()


def missing_local_inputs(spec: JobSpec) -> list[tuple[str, str]]:
    """(field path, reason) for every local input the spec names that does not exist."""
    checks = spec.input_locations()
    problems = []
    for field_path, uri in checks:
        if location_kind(uri) == "local" and not Path(local_path(uri)).exists():
            problems.append((field_path, f"{uri} does not exist"))
    return problems


__all__ = [
    "DataError",
    "StorageError",
    "UnsupportedCheckpoint",
    "checkpoint_problem",
    "materialise_dataset",
    "missing_local_inputs",
    "read_hf_config",
    "resolve_model",
    "stage_directory",
]
