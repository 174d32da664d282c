"""Run a module as if torch were not installed, for the tests of stages that must run without it.

A TPU VM's Python 3.12 may have no torch wheel at all; this venv has one, so "works without torch" is a claim
only a process that cannot see torch can check:

    python -m harness.no_torch trainer make-model smollm2-135m --out DIR      # from the repository root
    subprocess.run(harness.no_torch.command("trainer", "make-model", ...), cwd=REPO)

runs `python -m trainer make-model ...` with torch hidden. In process, `hide_torch()` does the same for the
rest of the interpreter's life (there is no undo: a module imported meanwhile may hold what it saw).

Hidden the way an absent package is: `import torch` and `import torch.<x>` raise ModuleNotFoundError, and
`importlib.util.find_spec("torch")` answers None, which is how libraries probe for it (transformers'
is_torch_available) and decide to take their torch-free paths. A finder that raised from find_spec would make
those probes crash instead, which no real machine does. Not hidden: torch's distribution metadata
(`importlib.metadata.version("torch")` still answers) and child processes, which start with torch visible.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType

HIDDEN = "torch"


def _is_hidden(fullname: str) -> bool:
    return fullname == HIDDEN or fullname.startswith(HIDDEN + ".")


class TorchBlocker(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: refuses torch and its submodules even if the sys.modules entry is removed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if _is_hidden(fullname):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden by harness.no_torch)", name=fullname)
        return None


def hide_torch() -> None:
    """Hide torch from this interpreter; refuses if it was already imported (then it is too late)."""
    loaded = sorted(name for name, module in sys.modules.items() if _is_hidden(name) and module is not None)
    if loaded:
        raise RuntimeError(f"torch is already imported ({', '.join(loaded[:3])}): hide it before anything imports it")
    if not any(isinstance(finder, TorchBlocker) for finder in sys.meta_path):
        sys.meta_path.insert(0, TorchBlocker())
    # None in sys.modules: `import torch` raises ModuleNotFoundError and find_spec("torch") answers None.
    sys.modules[HIDDEN] = None  # type: ignore[assignment]


def command(module: str, *args: str) -> list[str]:
    """argv that runs `python -m module args...` with torch hidden; run it with the repository root as cwd."""
    return [sys.executable, "-m", __name__, module, *args]


def main(argv: list[str]) -> None:
    if not argv or argv[0].startswith("-"):
        raise SystemExit("usage: python -m harness.no_torch MODULE [ARGS...]  (runs `python -m MODULE ARGS...`)")
    hide_torch()
    sys.argv = argv  # what `python -m MODULE ARGS...` would see: alter_sys sets argv[0] to the module's path
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
