"""The manifest and the paths the build (here) and the chip's unpack and install agree on.

Standard library only and nothing newer than Python 3.11: the chip's own python3 runs this.

A build's manifest.json lists every staged file (a wheel) with its sha256 and size, and its parts: one part named
as the file when it fits a chunk, else `<file>.partNN`, each with the chunk that carries it and its own sha256.
A copy of the manifest travels in every chunk, so any one chunk says where it lands on the chip and what is still
missing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
FORMAT = 1
# What one device call carries: the working tree (tracked and untracked-not-ignored files) and the carried paths.
CARRY_LIMIT_BYTES = 64 * 1024 * 1024
READ_BYTES = 4 * 1024 * 1024


class StageError(Exception):
    """A problem the person staging can act on; printed as one message, never as a traceback."""


@dataclass(frozen=True)
class ChipPaths:
    """Where things go on the chip's machine, all under one temporary root (its /tmp survives between calls only
    while the machine stays warm)."""

    stage: str  # the unpacked parts and the joined files
    venv: str  # the Python 3.12 virtualenv the wheels are installed into
    env_file: str  # sourced before each run
    repo_link: str  # a link to the checkout the call runs in; the venv puts it on sys.path

    @classmethod
    def under(cls, root: str) -> ChipPaths:
        base = root.rstrip("/")
        return cls(f"{base}/rljob-stage", f"{base}/rljob-venv", f"{base}/rljob-env.sh", f"{base}/rljob-repo")

    def as_dict(self) -> dict[str, str]:
        return {"stage": self.stage, "venv": self.venv, "env_file": self.env_file, "repo_link": self.repo_link}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(READ_BYTES):
            digest.update(block)
    return digest.hexdigest()


def part_names(file_name: str, count: int) -> list[str]:
    if count == 1:
        return [file_name]
    width = max(2, len(str(count - 1)))
    return [f"{file_name}.part{i:0{width}d}" for i in range(count)]


def load_manifest(path: Path) -> dict[str, Any]:
    """A manifest as build wrote it; StageError naming the file when it is missing or of another format."""
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise StageError(f"{path} is missing: this is not a chunk or stage folder of scripts/tpu_stage.py build") from None
    except (OSError, ValueError) as e:
        raise StageError(f"{path} cannot be read as a manifest: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StageError(f"{path} is not a format-{FORMAT} manifest of scripts/tpu_stage.py build: build again with this checkout")
    return manifest


def chip_paths(manifest: dict[str, Any]) -> ChipPaths:
    return ChipPaths(**manifest["chip"])


def parts_of_chunk(manifest: dict[str, Any], chunk: str) -> list[dict[str, Any]]:
    return [part for f in manifest["files"] for part in f["parts"] if part["chunk"] == chunk]


def chunks_missing(manifest: dict[str, Any], stage: Path) -> list[str]:
    """The chunks with a part not (yet) in the stage folder, in order. Presence by name and size: each part's
    sha256 was checked as it landed."""
    missing = set()
    for f in manifest["files"]:
        for part in f["parts"]:
            landed = stage / part["name"]
            if not (landed.is_file() and landed.stat().st_size == part["size"]):
                missing.add(part["chunk"])
    return [c["name"] for c in manifest["chunks"] if c["name"] in missing]


def carry_of(manifest: dict[str, Any], chunk: str) -> str:
    return str(next(c["carry"] for c in manifest["chunks"] if c["name"] == chunk))
