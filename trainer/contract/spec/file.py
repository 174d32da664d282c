"""Reading a job spec file (YAML or JSON) into a JobSpec, with every problem named by field path.

The one reader for `python -m trainer run|plan` and for `rljob submit|run`: both must accept and
refuse the same files with the same messages. Spec files may refer to environment variables as
`${NAME}` (examples/tiny-cpu.yaml uses them for paths that depend on where `make-tiny` wrote its
files); an unset variable is an error, never an empty string.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainer.contract.spec.job import JobSpec

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# The field of a problem with the file itself rather than with one of the spec's fields.
FILE_FIELD = "(file)"


class SpecFileError(Exception):
    """A spec file that cannot become a JobSpec; `problems` are (field path, reason) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {reason}" for field, reason in problems))
        self.problems = problems


def validation_problems(error: ValidationError) -> list[tuple[str, str]]:
    return [(".".join(str(p) for p in item["loc"]) or "(spec)", item["msg"]) for item in error.errors()]


def _expand_variables(text: str) -> str:
    missing = sorted({m.group(1) for m in _VAR.finditer(text) if m.group(1) not in os.environ})
    if missing:
        raise SpecFileError([(FILE_FIELD, f"environment variable {name} is not set") for name in missing])
    return _VAR.sub(lambda m: os.environ[m.group(1)], text)


def read_spec_data(path: str | Path) -> dict[str, Any]:
    """The file's fields, variables expanded, not yet validated (the service validates a submission)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecFileError([(FILE_FIELD, f"cannot read {path}: {e.strerror}")]) from e
    text = _expand_variables(text)
    is_json = path.suffix == ".json"
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise SpecFileError([(FILE_FIELD, f"not valid {'JSON' if is_json else 'YAML'}: {e}")]) from e
    if not isinstance(data, dict):
        raise SpecFileError([(FILE_FIELD, "a spec is a mapping of fields (name, model, output, ...)")])
    return data


def load_spec_file(path: str | Path) -> JobSpec:
    data = read_spec_data(path)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise SpecFileError(validation_problems(e)) from e
