#!/usr/bin/env python3
"""Print the MaxText version pinned in constraints.txt: the one value the trainer image installs.

constraints.txt is the project's single pin file; the trainer image must install
`maxtext[tpu-post-train]==<that version>`, so image builds read it from there instead of repeating it.

Usage:
  scripts/maxtext_version.py                      # prints e.g. 0.2.5
  scripts/maxtext_version.py --check-env          # exit 1 unless $MAXTEXT_VERSION equals the pin
                                                  # (skaffold's before-build hook runs this)
  scripts/maxtext_version.py exec -- skaffold run -p gke
                                                  # runs the command with MAXTEXT_VERSION set to the pin

Only the standard library is used, so it runs before any virtual environment exists.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
# A pip/uv constraints line: `maxtext==0.2.5`, optionally with extras or an environment marker.
PIN_RE = re.compile(r"^\s*maxtext(?:\[[^\]]*\])?\s*==\s*([0-9][0-9A-Za-z.+!-]*)\s*(?:;.*)?$", re.IGNORECASE)


class PinError(RuntimeError):
    pass


def pinned_maxtext_version(constraints: Path = CONSTRAINTS) -> str:
    """The single `maxtext==X` pin in `constraints`; raises PinError if there is none or more than one."""
    try:
        lines = constraints.read_text().splitlines()
    except FileNotFoundError as e:
        raise PinError(f"{constraints} not found: it is the project's single pin file") from e
    versions = [m.group(1) for line in lines if (m := PIN_RE.match(line.split("#", 1)[0]))]
    if not versions:
        raise PinError(f"{constraints} has no 'maxtext==X' line; pin MaxText there (>= 0.2.4)")
    if len(set(versions)) > 1:
        raise PinError(f"{constraints} pins maxtext more than once: {versions}")
    return versions[0]


def main(argv: list[str]) -> int:
    try:
        version = pinned_maxtext_version()
    except PinError as e:
        print(f"maxtext_version: {e}", file=sys.stderr)
        return 2
    if not argv:
        print(version)
        return 0
    if argv[0] == "--check-env":
        got = os.environ.get("MAXTEXT_VERSION", "")
        if got != version:
            print(
                f"maxtext_version: MAXTEXT_VERSION={got!r} but constraints.txt pins maxtext=={version}.\n"
                "  Build through: scripts/maxtext_version.py exec -- skaffold run -p gke",
                file=sys.stderr,
            )
            return 1
        return 0
    if argv[0] == "exec":
        cmd = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        if not cmd:
            print("maxtext_version: exec needs a command, e.g. exec -- skaffold run -p gke", file=sys.stderr)
            return 2
        os.environ["MAXTEXT_VERSION"] = version
        os.execvp(cmd[0], cmd)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
