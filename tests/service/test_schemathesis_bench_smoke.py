"""bench/control_plane/schemathesis_bench.py in miniature: one short fuzzing round against the real service
(the image's factory, SQLite, local launcher running `true`), every operation reached, nothing
undeclared and no 5xx. The full bench (10,000+ requests, every phase) is run by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_schemathesis_round_passes(tmp_path: Path) -> None:
    out = tmp_path / "schemathesis.json"
    argv = [
        sys.executable,
        str(ROOT / "bench" / "control_plane" / "schemathesis_bench.py"),
        "--requests",
        "30",
        "--examples",
        "3",
        "--phases",
        "fuzzing",
        "--out",
        str(out),
    ]
    finished = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert out.exists(), finished.stdout[-2000:] + finished.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["requests"] >= 30 and result["operations_exercised"] == result["operations_declared"]
    assert (result["server_errors_5xx"], result["conformance_findings"], result["service_log_errors"]) == (0, [], [])
    assert result["passed"] is True and finished.returncode == 0, finished.stdout[-2000:]
