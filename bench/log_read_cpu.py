"""CPU per line of a log read without follow (GET /v1/jobs/{id}/logs of a finished job: its stage logs), the body
the route sends now (service/api/log_follow.py log_chunks: pieces of about 64 KiB) against the body it sent
before (one item per line), measured in the same run on the same lines.

Both bodies go through Starlette's StreamingResponse into an ASGI `send` that only counts bytes, so what differs
is what the route chose: Starlette steps a sync body in a worker thread per item. The lines are read by the
service's own reader (service/adapters/run_files.py) from a 1 MiB stage log (an eighth of its 8 MiB bound: the
cost is per line, and the baseline at 8 MiB of 2-byte lines takes minutes a read), of short lines (the worst case:
a per-line cost is paid most often) and of 100-byte lines.

    python bench/log_read_cpu.py            # measure, write bench/results/log_read_cpu.json, print the ratios
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from starlette.responses import StreamingResponse  # noqa: E402

from service.adapters.run_files import StoreRunFiles  # noqa: E402
from service.api.log_follow import log_chunks  # noqa: E402
from service.domain.models import JobRecord  # noqa: E402
from service.domain.phases import JobPhase  # noqa: E402
from trainer.contract import JobSpec, Stage  # noqa: E402

RESULT_FILE = REPO / "bench" / "results" / "log_read_cpu.json"
LINE_BYTES = (2, 100)  # "x\n": the most lines a log can hold; and a typical trainer line
LOG_BYTES = 1 << 20
REPEATS = 3


def per_line(lines: Iterator[str | None]) -> Iterator[bytes]:
    """The body before (the baseline): one item, so one worker-thread step, per line."""
    for line in lines:
        if line is not None:
            yield (line + "\n").encode()


async def _send_all(body: Iterator[bytes]) -> int:
    received = 0

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()  # the client never leaves
        return {}

    async def send(message: dict[str, Any]) -> None:
        nonlocal received
        received += len(message.get("body", b""))

    await StreamingResponse(body, media_type="text/plain")({"type": "http", "method": "GET"}, receive, send)
    return received


def _record(output: Path) -> JobRecord:
    spec = JobSpec.model_validate({"name": "bench", "model": {"source": "/models/tiny"}, "output": str(output)})
    now = datetime.now(UTC)
    return JobRecord(id="rl-benchlogread", team="bench", name="bench", spec=spec, spec_hash="h",
                     phase=JobPhase.SUCCEEDED, created_at=now, updated_at=now)  # fmt: skip


def _measure(record: JobRecord, body: Any) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, bytes) of one read through `body`."""
    cpu, wall = time.process_time(), time.perf_counter()
    received = anyio.run(_send_all, body(StoreRunFiles().stage_log_lines(record)))
    return time.process_time() - cpu, time.perf_counter() - wall, received


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        record = _record(Path(tmp))
        log = Path(record.layout.stage_log(Stage.TRAIN))
        log.parent.mkdir(parents=True)
        for line_bytes in LINE_BYTES:
            log.write_bytes((b"x" * (line_bytes - 1) + b"\n") * (LOG_BYTES // line_bytes))
            lines = LOG_BYTES // line_bytes
            runs: dict[str, list[tuple[float, float, int]]] = {"per_line": [], "chunks": []}
            for _ in range(REPEATS):  # interleaved, so a slow phase of the machine falls on both
                runs["per_line"].append(_measure(record, per_line))
                runs["chunks"].append(_measure(record, log_chunks))
            sizes = {r[2] for rs in runs.values() for r in rs}
            assert len(sizes) == 1, f"the two bodies sent different bytes: {sizes}"
            row: dict[str, Any] = {"line_bytes": line_bytes, "lines": lines, "bytes": sizes.pop()}
            for name, rs in runs.items():
                row[f"{name}_cpu_s"] = statistics.median(r[0] for r in rs)
                row[f"{name}_wall_s"] = statistics.median(r[1] for r in rs)
                row[f"{name}_cpu_us_per_line"] = row[f"{name}_cpu_s"] / lines * 1e6
            row["cpu_ratio"] = row["per_line_cpu_s"] / row["chunks_cpu_s"]
            rows.append(row)
            print(f"{line_bytes:>4}-byte lines x {lines:>9,}: per line {row['per_line_cpu_s']:7.2f} s CPU "
                  f"({row['per_line_cpu_us_per_line']:5.1f} us/line, {row['per_line_wall_s']:6.2f} s wall), in pieces "
                  f"{row['chunks_cpu_s']:6.2f} s CPU ({row['chunks_cpu_us_per_line']:5.2f} us/line), "
                  f"{row['cpu_ratio']:6.1f}x less CPU (median of {REPEATS})")  # fmt: skip
    RESULT_FILE.write_text(json.dumps({"bench": "log_read_cpu", "repeats": REPEATS, "log_bytes": LOG_BYTES, "rows": rows},
                                      indent=1) + "\n")  # fmt: skip
    print(f"wrote {RESULT_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
