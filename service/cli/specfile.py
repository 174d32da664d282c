"""Reads a job spec file (YAML or JSON) for `rljob submit`, naming every problem by field path.

`${NAME}` refers to an environment variable (examples/tiny-cpu.yaml uses it for paths); an unset
one is an error, never an empty string. Mirrors trainer/specfile.py because the service may import
only trainer.contract from the trainer.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainer.contract import JobSpec

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SpecFileError(Exception):
    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {reason}" for field, reason in problems))
        self.problems = problems


def read_spec_data(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecFileError([("(file)", f"cannot read {path}: {e.strerror}")]) from e
    missing = sorted({m.group(1) for m in _VAR.finditer(text) if m.group(1) not in os.environ})
    if missing:
        raise SpecFileError([("(file)", f"environment variable {name} is not set") for name in missing])
    text = _VAR.sub(lambda m: os.environ[m.group(1)], text)
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise SpecFileError([("(file)", f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}")]) from e
    if not isinstance(data, dict):
        raise SpecFileError([("(file)", "a spec is a mapping of fields (name, model, output, ...)")])
    return data


def load_spec_file(path: Path) -> JobSpec:
    data = read_spec_data(path)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise SpecFileError(
            [(".".join(str(p) for p in err["loc"]) or "(spec)", err["msg"]) for err in e.errors()]
        ) from e
