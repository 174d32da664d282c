"""Where a benchmark result was measured: every result file in bench/results/ carries these facts, so a figure in
the README traces to a machine, its load, a commit and the command that produced it.

    from bench.result_meta import write_result
    write_result("sse_fanout.json", report)   # adds "machine" (facts at the start) and "load_average_at_end"
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()


def uncommitted_changes(repo: Path = REPO) -> bool:
    """Whether the measured code (service, trainer and the benches, not the result files benches write) differs
    from the commit: a modified file, or an untracked one git does not ignore (a new module the run imported is
    as much uncommitted code as an edited one)."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", "service", "trainer", "bench", ":(exclude)bench/results"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    return bool(status.stdout.strip())


def machine_facts() -> dict[str, Any]:
    """Cores, the load average (1, 5, 15 min) now, the commit (and whether the measured code differed from it)
    and the command line. Call it when the measurement starts."""
    return {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "commit": _git("rev-parse", "--short=10", "HEAD"),
        "uncommitted_changes": uncommitted_changes(),
        "command": " ".join(
            [Path(sys.executable).name, *(Path(a).relative_to(REPO).as_posix() if a.startswith(str(REPO)) else a for a in sys.argv)]
        ),
    }


def write_result(name: str, report: dict[str, Any], machine: dict[str, Any] | None = None) -> Path:
    """Write bench/results/NAME with `machine` (the facts taken at the start; now if not given) and the load at the
    end added; returns the path."""
    facts = dict(machine or machine_facts())
    facts["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    path = RESULTS / name
    path.write_text(json.dumps({**report, "machine": facts}, indent=2) + "\n")
    print(f"wrote {path.relative_to(REPO)}", flush=True)
    return path
