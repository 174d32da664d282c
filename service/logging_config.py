"""The service process's logging, set up once by its entrypoints (`rljob serve` and the image's
`create_app_from_env`), never by `create_app`: tests build many apps in one process.

One handler on the root logger writes to stderr: a JSON object per line when stderr is not a
terminal (a container, a pipe, a log collector), a readable line on a terminal. uvicorn's own
loggers are routed through it too, so an operator reads one format. The service's loggers log at
INFO (start-up recovery, re-attaches, relaunches); libraries only from WARNING.

Tokens never reach the log: anything shaped like one (`rlj_...`, a Bearer credential) and the
secrets the entrypoint names are masked in every message and traceback.

The access log keeps every write and every refusal, and at most `access_log_reads_per_s` successful reads a second
(`ReadSampler`): a dashboard polling status would otherwise fill the log with identical lines, and writing them was
the largest share of a polled status read's cost beyond the framework's (found by serving with and without them; the
read itself: bench/control_plane/status_read.py --running). The next read line logged says how many were left out
before it (`reads_not_logged`); the reads of a last burst with no read after it are not counted anywhere.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TextIO

SERVICE_LOGGERS = ("service",)
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
REDACTED = "[redacted]"
NOT_LOGGED = "reads_not_logged"  # on an access-log line: successful reads left out since the last one logged
ACCESS_LOGGER = "uvicorn.access"
_TOKEN_SHAPES = re.compile(r"(?i)(bearer\s+)\S+|rlj_[A-Za-z0-9_-]+")


class SecretMasker:
    """Replaces token-shaped strings and the known secrets in a log text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return _TOKEN_SHAPES.sub(lambda m: (m.group(1) or "") + REDACTED, text)


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, exception."""

    def __init__(self, mask: SecretMasker) -> None:
        super().__init__()
        self.mask = mask

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": self.mask(record.getMessage()),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _, status = record.args  # uvicorn's access-log arguments, as fields
            entry.update(client=client, method=method, path=self.mask(str(path)), status=status)
            if skipped := getattr(record, NOT_LOGGED, 0):
                entry[NOT_LOGGED] = skipped
        if record.exc_info:
            entry["exception"] = self.mask(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


class HumanFormatter(logging.Formatter):
    def __init__(self, mask: SecretMasker) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
        self.mask = mask

    def format(self, record: logging.LogRecord) -> str:
        line = self.mask(super().format(record))
        skipped = getattr(record, NOT_LOGGED, 0)
        return f"{line} ({skipped} successful reads not logged before it)" if skipped else line


class ReadSampler(logging.Filter):
    """On uvicorn's access log: every request but successful reads (GET or HEAD answered below 400) passes; of those,
    `per_s` a second (0: all). The next read that passes carries the count left out (`reads_not_logged`). Its clock is
    monotonic: a wall-clock step neither floods nor silences the log."""

    def __init__(self, per_s: int, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.per_s, self.clock = per_s, clock
        self._lock = threading.Lock()
        self._second, self._passed, self._skipped = -1, 0, 0

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if self.per_s == 0 or not isinstance(args, tuple) or len(args) != 5:
            return True
        method, status = args[1], args[4]
        if method not in ("GET", "HEAD") or not isinstance(status, int) or status >= 400:
            return True
        with self._lock:
            second = int(self.clock())
            if second != self._second:
                self._second, self._passed = second, 0
            if self._passed >= self.per_s:
                self._skipped += 1
                return False
            self._passed += 1
            skipped, self._skipped = self._skipped, 0
        if skipped:
            setattr(record, NOT_LOGGED, skipped)
        return True


class _ServiceLogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler this module installs (a second call replaces it instead of adding one). Without
    an explicit stream it writes to whatever sys.stderr is at the time, as print() would."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream)
        self._follow_stderr = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self._follow_stderr:
            self.stream = sys.stderr
        super().emit(record)


def configure_logging(
    *,
    level: int | str = logging.INFO,
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
    json_lines: bool | None = None,
    access_log_reads_per_s: int = 0,
) -> None:
    """Route every log record to `stream` (stderr): JSON lines unless it is a terminal; uvicorn's access log keeps
    `access_log_reads_per_s` successful reads a second (0: all)."""
    if json_lines is None:
        json_lines = not (stream or sys.stderr).isatty()
    mask = SecretMasker(secrets)
    handler = _ServiceLogHandler(stream)
    handler.setFormatter(JsonLineFormatter(mask) if json_lines else HumanFormatter(mask))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _ServiceLogHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in SERVICE_LOGGERS:
        logging.getLogger(name).setLevel(level)
    for name in UVICORN_LOGGERS:  # their own handlers (uvicorn's default config) would print a second format
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
        if uvicorn_logger.level == logging.NOTSET or name == "uvicorn":
            uvicorn_logger.setLevel(logging.INFO)
    access = logging.getLogger(ACCESS_LOGGER)
    for old_sampler in [f for f in access.filters if isinstance(f, ReadSampler)]:
        access.removeFilter(old_sampler)
    access.addFilter(ReadSampler(access_log_reads_per_s))
