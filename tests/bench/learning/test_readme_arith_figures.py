"""bench/learning/README.md's arith-difficulty figures (docs/trainer.md links to them) are the ones
bench/results/arith_difficulty.json recorded."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_bench_page_quotes_the_chosen_difficulty_as_measured() -> None:
    choice = json.loads((ROOT / "bench" / "results" / "arith_difficulty.json").read_text())["choice"]
    readme = (ROOT / "bench" / "learning" / "README.md").read_text()
    quoted = re.search(r"one-digit products at temperature ([\d.]+): pass@1 ([\d.]+), pass@8 ([\d.]+), (\d+)% of groups", readme)
    assert quoted, "bench/learning/README.md's arith paragraph no longer states the chosen difficulty"
    temperature, pass_at_1, pass_at_8, mixed = quoted.groups()
    assert float(temperature) == choice["temperature"]
    assert pass_at_1 == f"{choice['pass_at_1']:.2f}" and pass_at_8 == f"{choice['pass_at_8']:.2f}"
    assert int(mixed) == round(choice["mixed_groups"] * 100)
    assert choice["setting"] == {"digits": 1, "operands": 2, "operators": "*"}  # "one-digit products"
