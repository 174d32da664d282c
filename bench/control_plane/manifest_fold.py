"""How long folding a manifest into a job's artifacts takes (service/domain/progress.py: fold_manifest, whose
reduction, service/domain/manifest_sizes.py, runs inside the store's write lock for a manifest parsed in the service and
in a worker process for a large one), against the scan per artifact it replaced, measured in the same run.

A run directory of FILES files under ARTIFACTS directory artifacts (each a checkpoint-like directory of its own
files); both folds get the same record and manifest, and their results must agree.

    python bench/control_plane/manifest_fold.py            # measure, write bench/results/manifest_fold.json, print the ratio
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from service.domain.progress import fold_manifest  # noqa: E402
from service.domain.records.manifest_sizes import artifact_key  # noqa: E402
from service.domain.records.models import JobRecord  # noqa: E402
from service.domain.records.phases import JobPhase  # noqa: E402
from service.domain.records.run_report import Artifact  # noqa: E402
from trainer.contract import JobSpec  # noqa: E402

RESULT_FILE = REPO / "bench" / "results" / "manifest_fold.json"
SIZES = ((300, 30_000), (1_000, 100_000))  # (artifacts, files); the scan's cost is their product
REPEATS = 3


def _scan_fold(record: JobRecord, manifest: dict[str, Any]) -> None:
    """The fold before bisection: every artifact scans every file (the baseline)."""
    files = [f for f in manifest.get("artifacts") or [] if isinstance(f, dict) and f.get("uri")]
    by_uri = {artifact_key(f["uri"]): f for f in files}
    for name, artifact in list(record.report.artifacts.items()):
        uri = artifact_key(artifact.uri)
        inside = [f for key, f in by_uri.items() if key.startswith(uri + "/")]
        if inside:
            record.report.artifacts[name] = artifact.model_copy(
                update={"size_bytes": sum(f.get("size_bytes") or 0 for f in inside), "file_count": len(inside)}
            )


def _case(artifacts: int, files: int) -> tuple[JobRecord, dict[str, Any]]:
    spec = JobSpec.model_validate({"name": "bench", "model": {"source": "/models/tiny"}, "output": "/r"})
    now = datetime.now(UTC)
    record = JobRecord(
        id="rl-benchbenchbe", team="bench", name="bench", spec=spec, spec_hash="h", phase=JobPhase.RUNNING, created_at=now, updated_at=now
    )
    record.report.artifacts = {f"ckpt.{i}": Artifact(name=f"ckpt.{i}", uri=f"/r/ckpt/{i}") for i in range(artifacts)}
    per = files // artifacts
    entries = [{"uri": f"/r/ckpt/{i}/part-{j}", "size_bytes": j, "checksum": "md5:0"} for i in range(artifacts) for j in range(per)]
    return record, {"artifacts": entries}


def _time(fold: Any, artifacts: int, files: int) -> tuple[float, dict[str, tuple[int | None, int | None]]]:
    times, result = [], {}
    for _ in range(REPEATS):
        record, manifest = _case(artifacts, files)
        started = time.perf_counter()
        fold(record, manifest)
        times.append(time.perf_counter() - started)
        result = {n: (a.size_bytes, a.file_count) for n, a in record.report.artifacts.items()}
    return statistics.median(times), result


def main() -> int:
    rows = []
    for artifacts, files in SIZES:
        scan_s, scanned = _time(_scan_fold, artifacts, files)
        bisect_s, bisected = _time(fold_manifest, artifacts, files)
        assert scanned == bisected, "the two folds disagree"
        rows.append({"artifacts": artifacts, "files": files, "scan_s": scan_s, "bisect_s": bisect_s, "ratio": scan_s / bisect_s})
        print(
            f"{artifacts:>6} artifacts x {files:>7} files: scan {scan_s:8.3f} s, bisection {bisect_s:6.3f} s, "
            f"{scan_s / bisect_s:7.1f}x (median of {REPEATS})"
        )
    RESULT_FILE.write_text(json.dumps({"bench": "manifest_fold", "repeats": REPEATS, "rows": rows}, indent=1) + "\n")
    print(f"wrote {RESULT_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
