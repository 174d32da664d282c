"""Records which modules a process loads, and who asked for each: trace.py installs it into a throwaway virtualenv.

That virtualenv's site-packages holds this file (as _rljob_trace_hook.py), its configuration beside it and a .pth
that imports it, so it runs at the start of every process of that interpreter: also a `python -I` one (the reward
sandbox's workers start so, with an empty environment: PYTHONPATH or a variable would not reach them), and every
stage, since the trainer starts them with sys.executable. It then adds the site folders its configuration names
(the project venv's site-packages, or trace.py's copy of it without torch's files: torch not installed, as on the
chip), their .pth files included, and puts a finder first on sys.meta_path that returns nothing: it only notes each
name an import looks for and the module that asked. A name is written to the process's record once it has loaded,
at the next import and at exit, so a process that ends with os._exit or a signal still leaves most of its record.
Standard library only.
"""

from __future__ import annotations

import atexit
import json
import os
import site
import sys
from types import FrameType
from typing import Any

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rljob_trace_hook.json")
IMPORT_MACHINERY = ("importlib", "_frozen_importlib", __name__)


def _importer() -> str:
    """The module whose code asked for the import: the first frame outside the import machinery and this hook."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith(IMPORT_MACHINERY):
            return name
        frame = frame.f_back
    return "?"


class Recorder:
    """On sys.meta_path, first: finds nothing, records names. A name looked for and never loaded (a probe for an
    optional package) is never written."""

    def __init__(self, fd: int, startup: set[str]) -> None:
        self.fd = fd
        self.done = set(startup)  # what site's .pth files loaded: not the process's own imports
        self.pending: dict[str, str] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname not in self.done and fullname not in self.pending:
            self.pending[fullname] = _importer()
        self.flush()
        return None

    def _write(self, rows: list[tuple[str, str]]) -> None:
        if rows:
            self.done.update(name for name, _ in rows)
            try:
                os.write(self.fd, "".join(f"{name}\t{by}\n" for name, by in rows).encode())
            except OSError:  # a confined reward worker may not write any more: the record keeps what it had
                pass

    def flush(self) -> None:
        loaded = [name for name in list(self.pending) if sys.modules.get(name) is not None]
        self._write([(name, self.pending.pop(name, "?")) for name in loaded])

    def at_exit(self) -> None:
        self.flush()
        # Modules that reached sys.modules without a finder (set directly, or found before this one was first).
        self._write([(name, "?") for name, module in list(sys.modules.items()) if module is not None and name not in self.done])


def _start() -> None:
    with open(CONFIG) as f:
        config = json.load(f)
    for folder in config["site"]:
        site.addsitedir(folder)
    name = os.path.join(config["out"], f"{os.getpid()}-{os.urandom(4).hex()}.trace")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    header = {"argv": sys.orig_argv, "pid": os.getpid(), "step": os.environ.get("RLJOB_TRACE_STEP", "")}
    os.write(fd, (json.dumps(header) + "\n").encode())
    recorder = Recorder(fd, set(sys.modules))
    sys.meta_path.insert(0, recorder)
    atexit.register(recorder.at_exit)


_start()
