"""Reading a job spec file (YAML or JSON) into a JobSpec, with every problem named by field path.

Spec files may refer to environment variables as `${NAME}` (examples/tiny-cpu.yaml uses them for
paths that depend on where `make-tiny` wrote its files); an unset variable is an error, not "".
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from trainer.contract import JobSpec

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SpecError(Exception):
    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{f}: {r}" for f, r in problems))


def _expand(text: str) -> str:
    missing = sorted({m.group(1) for m in _VAR.finditer(text) if m.group(1) not in os.environ})
    if missing:
        raise SpecError([("(file)", f"environment variable {name} is not set") for name in missing])
    return _VAR.sub(lambda m: os.environ[m.group(1)], text)


def validation_problems(error: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for item in error.errors():
        path = ".".join(str(p) for p in item["loc"]) or "(spec)"
        problems.append((path, item["msg"]))
    return problems


def load_spec(path: str | Path) -> JobSpec:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SpecError([("(file)", f"cannot read {path}: {e.strerror}")]) from e
    text = _expand(text)
    try:
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise SpecError([("(file)", f"not valid {'JSON' if str(path).endswith('.json') else 'YAML'}: {e}")]) from e
    if not isinstance(data, dict):
        raise SpecError([("(file)", "the spec must be a mapping of fields")])
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(validation_problems(e)) from e
