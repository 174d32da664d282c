"""CPU per line of a log read without follow (GET /v1/jobs/{id}/logs of a finished job: its stage logs), the body
the route sends now (service/api/log_follow.py log_chunks: pieces of about 64 KiB) against the body it sent
before (one item per line), measured in the same run on the same lines; and the same for a follow
(?follow=true) of a local job's output.log: the stream now (log_follow.follow_log, one worker-thread step per
piece of ready lines) against the stream before (one step per line).

Both bodies go through Starlette's StreamingResponse into an ASGI `send` that only counts bytes, so what differs
is what the route chose: Starlette steps a sync body in a worker thread per item. The lines are read by the
service's own reader (service/adapters/run_files.py) from a 1 MiB stage log (an eighth of its 8 MiB bound: the
cost is per line, and the baseline at 8 MiB of 2-byte lines takes minutes a read), of short lines (the worst case:
a per-line cost is paid most often) and of 100-byte lines.

The follow is measured on a job that has just ended, so the whole log is ready and the stream ends at its last
line: what a follower pays per line while a trainer prints faster than it is read.

    python bench/control_plane/log_read_cpu.py            # measure, write bench/results/log_read_cpu.json, print the ratios
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from starlette.responses import StreamingResponse  # noqa: E402

from service.adapters.local.output_log import output_lines  # noqa: E402
from service.adapters.run_files import StoreRunFiles  # noqa: E402
from service.api.log_follow import LogFollowers, Pacer, follow_log, log_chunks  # noqa: E402
from service.domain.records.models import JobRecord  # noqa: E402
from service.domain.records.phases import JobPhase  # noqa: E402
from trainer.contract import JobSpec, Stage  # noqa: E402

RESULT_FILE = REPO / "bench" / "results" / "log_read_cpu.json"
LINE_BYTES = (2, 100)  # "x\n": the most lines a log can hold; and a typical trainer line
LOG_BYTES = 1 << 20
FOLLOW_LOG_BYTES = 1 << 18  # the follow's baseline is as slow per line; a quarter of the lines is enough to see it
_END = object()
REPEATS = 3


def per_line(lines: Iterator[str | None]) -> Iterator[bytes]:
    """The body before (the baseline): one item, so one worker-thread step, per line."""
    for line in lines:
        if line is not None:
            yield (line + "\n").encode()


async def follow_per_line(lines: Iterator[str | None]) -> AsyncIterator[bytes]:
    """The follow before (the baseline): one worker-thread step per line (the stream's disconnect and terminal
    checks come only when nothing is ready, so a log that is all ready never reaches them)."""
    while (line := await anyio.to_thread.run_sync(next, lines, _END)) is not _END:
        if line is not None:
            yield (str(line) + "\n").encode()


def follow_now(lines: Iterator[str | None]) -> AsyncIterator[bytes]:
    async def connected() -> bool:
        return False

    # Unpaced (the fastest a follow may be set to send): what is measured is the CPU per line.
    return follow_log(
        lines, LogFollowers(1), "bench", is_disconnected=connected, is_terminal=lambda: True, poll_interval_s=0.01, pacer=Pacer(1 << 30)
    )


async def _send_all(body: Iterator[bytes] | AsyncIterator[bytes]) -> int:
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
    return JobRecord(
        id="rl-benchlogread", team="bench", name="bench", spec=spec, spec_hash="h", phase=JobPhase.SUCCEEDED, created_at=now, updated_at=now
    )


def _measure(read: Any, body: Any) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, bytes) of one read of `read()`'s lines through `body`."""
    cpu, wall = time.process_time(), time.perf_counter()
    received = anyio.run(_send_all, body(read()))
    return time.process_time() - cpu, time.perf_counter() - wall, received


def _row(read: Any, bodies: dict[str, Any], line_bytes: int, lines: int) -> dict[str, Any]:
    """Median CPU and wall of each body on the same lines; the first body is the baseline."""
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in bodies}
    for _ in range(REPEATS):  # interleaved, so a slow phase of the machine falls on both
        for name, body in bodies.items():
            runs[name].append(_measure(read, body))
    sizes = {r[2] for rs in runs.values() for r in rs}
    assert len(sizes) == 1, f"the two bodies sent different bytes: {sizes}"
    row: dict[str, Any] = {"line_bytes": line_bytes, "lines": lines, "bytes": sizes.pop()}
    for name, rs in runs.items():
        row[f"{name}_cpu_s"] = statistics.median(r[0] for r in rs)
        row[f"{name}_wall_s"] = statistics.median(r[1] for r in rs)
        row[f"{name}_cpu_us_per_line"] = row[f"{name}_cpu_s"] / lines * 1e6
    baseline, now = list(bodies)
    row["cpu_ratio"] = row[f"{baseline}_cpu_s"] / row[f"{now}_cpu_s"]
    print(
        f"{line_bytes:>4}-byte lines x {lines:>9,}: {baseline} {row[f'{baseline}_cpu_s']:7.2f} s CPU "
        f"({row[f'{baseline}_cpu_us_per_line']:5.1f} us/line, {row[f'{baseline}_wall_s']:6.2f} s wall), {now} "
        f"{row[f'{now}_cpu_s']:6.2f} s CPU ({row[f'{now}_cpu_us_per_line']:5.2f} us/line), "
        f"{row['cpu_ratio']:6.1f}x less CPU (median of {REPEATS})"
    )
    return row


def main() -> int:
    rows, follow_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        record = _record(Path(tmp))
        log = Path(record.layout.stage_log(Stage.TRAIN))
        log.parent.mkdir(parents=True)
        output_log = Path(tmp) / "output.log"
        for line_bytes in LINE_BYTES:
            log.write_bytes((b"x" * (line_bytes - 1) + b"\n") * (LOG_BYTES // line_bytes))
            rows.append(
                _row(
                    lambda: StoreRunFiles().stage_log_lines(record),
                    {"per_line": per_line, "chunks": log_chunks},
                    line_bytes,
                    LOG_BYTES // line_bytes,
                )
            )
        for line_bytes in LINE_BYTES:
            output_log.write_bytes((b"x" * (line_bytes - 1) + b"\n") * (FOLLOW_LOG_BYTES // line_bytes))
            follow_rows.append(
                _row(
                    lambda: output_lines(output_log, lambda: False, time.monotonic, follow=True),
                    {"follow_per_line": follow_per_line, "follow_pieces": follow_now},
                    line_bytes,
                    FOLLOW_LOG_BYTES // line_bytes,
                )
            )
    RESULT_FILE.write_text(
        json.dumps(
            {
                "bench": "log_read_cpu",
                "repeats": REPEATS,
                "log_bytes": LOG_BYTES,
                "rows": rows,
                "follow_log_bytes": FOLLOW_LOG_BYTES,
                "follow_rows": follow_rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {RESULT_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
