"""The code every test process runs is this checkout's.

The project venv holds rljob as an editable install, which points at one checkout. Child processes
that do not start in the repository root (the emulated pods, each in its own WORKDIR;
scripts run by path) import `service` and `trainer` through that install, so a venv shared between
two clones would test the other clone's code and pass or fail for the wrong reasons. A test run
therefore refuses to start unless the venv's install points here.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]


def installed_checkout() -> Path | None:
    """Where the venv's editable rljob install points; None when it is not an editable install."""
    # The installer's record (PEP 610); a source tree's rljob.egg-info on sys.path carries none.
    recorded = [text for dist in metadata.distributions(name="rljob") if (text := dist.read_text("direct_url.json"))]
    if not recorded:
        return None
    data = json.loads(recorded[0])
    if not data.get("dir_info", {}).get("editable"):
        return None
    return Path(unquote(urlsplit(data["url"]).path)).resolve()


def mismatch(installed: Path | None, root: Path = ROOT) -> str | None:
    """Why this venv cannot test `root`, or None when it can."""
    if installed is None:
        return (
            f"rljob is not installed in editable mode in this venv: child processes would not run {root}; run {root}/scripts/bootstrap.sh"
        )
    if installed != root.resolve():
        return (
            f"this venv's rljob is the checkout at {installed}, not the one under test ({root}): processes started "
            f"outside the repository root would run the other checkout's code. Run {root}/scripts/bootstrap.sh "
            "(it makes a venv for this checkout; RLJOB_VENV chooses where)"
        )
    return None
