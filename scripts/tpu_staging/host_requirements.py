"""host_requirements.txt: the distributions a TPU host needs to run rljob, one `name==version  # why` a line.

`scripts/tpu_stage.py trace` writes it (a header saying how and at which commit, then a line a distribution with the
traced processes that import it); `build` reads the names and stages each at its constraints.txt pin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .layout import StageError

REQUIREMENTS = Path(__file__).with_name("host_requirements.txt")
LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s#]+)\s*(?:#\s*(?P<why>.*))?$")


@dataclass(frozen=True)
class Requirement:
    name: str  # canonical: lower case, runs of -_. as one -
    version: str
    why: str


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_requirements(path: Path = REQUIREMENTS) -> list[Requirement]:
    try:
        text = path.read_text()
    except OSError as e:
        raise StageError(f"cannot read the host requirements {path}: {e.strerror}") from None
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = LINE.match(line)
        if not match:
            raise StageError(f"{path}:{number}: expected `name==version  # why`, got {line!r}")
        found.append(Requirement(canonical(match["name"]), match["version"], (match["why"] or "").strip()))
    if not found:
        raise StageError(f"{path} names no distribution")
    return found


def write_requirements(path: Path, header: list[str], requirements: list[Requirement]) -> None:
    width = max(len(f"{r.name}=={r.version}") for r in requirements)
    lines = [f"# {h}".rstrip() for h in header]
    lines += [f"{r.name}=={r.version}".ljust(width) + f"  # {r.why}" for r in sorted(requirements, key=lambda r: r.name)]
    path.write_text("\n".join(lines) + "\n")
