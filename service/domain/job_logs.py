"""A job's log: the launcher's while the workload exists, else the stage logs in its run directory.

The launcher's log is the trainer's whole output, live; it goes when the workload goes (a Job's
pods after ttlSecondsAfterFinished, a local job's state directory). The stage logs the trainer
publishes under `<run>/logs/<stage>.log` stay with the run, so a finished job's log can always be
read. The fallback is taken only when the launcher yields nothing at all: once it has produced a
line, its stream is the answer, so the two are never interleaved.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator

from service.domain.records.models import JobRecord
from service.domain.records.ports import JobLauncher, RunFiles

log = logging.getLogger(__name__)


def job_log_lines(
    launcher: JobLauncher,
    run_files: RunFiles | None,
    record: JobRecord,
    *,
    follow: bool,
    tail_lines: int | None,
) -> Iterator[str | None]:
    """None (following only) means nothing new yet; see JobLauncher.logs."""
    produced = False
    try:
        for line in launcher.logs(record.id, follow=follow, tail_lines=tail_lines):
            produced = produced or line is not None
            yield line
    except Exception as e:  # noqa: BLE001 - an unreachable backend still leaves the stored logs
        if produced:
            log.warning("log stream of %s ended early: %s", record.id, e)
            return
        log.warning("the %s launcher has no logs for %s (%s); reading the run directory", launcher.backend, record.id, e)
    if produced or run_files is None:
        return
    lines = run_files.stage_log_lines(record)
    if tail_lines is not None:
        yield from deque(lines, maxlen=tail_lines)  # bounded: never holds more than the tail
    else:
        yield from lines
