"""Wheels of what this venv has installed: a local, offline source of the pinned wheels for the wheelhouse test.

scripts/tpu_vm_wheelhouse.py takes wheels from an index or from `--find-links` directories. The suite has no index
it may download from, and uv (scripts/bootstrap.sh) keeps its cache unpacked, so the test builds its directory here:
each distribution of a requirement's closure, as installed, packed back into a wheel under the tags of its WHEEL
file (the tags of the wheel it was installed from), its RECORD written afresh. Packed back are the files under
site-packages; what an install put elsewhere (console scripts, which pip writes again from entry_points.txt, and
a `.data/scripts` file's copy in bin/) is left out, and so is bytecode. The contents match the installed ones, not
PyPI's bytes: the hashes the wheelhouse records are these wheels'.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import parse_tag
from packaging.utils import canonicalize_name

# Large shared libraries gain little from deflate and cost most of the packing time.
STORED_SUFFIXES = (".so", ".a")


def closure(requirements: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions the requirements need, with extras, markers evaluated for this interpreter."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(Requirement(r), "") for r in requirements]
    done: set[tuple[str, str]] = set()
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        dist = found.get(name) or importlib.metadata.distribution(req.name)
        found[name] = dist
        for wanted in ["", *sorted(req.extras)]:
            if (name, wanted) in done:
                continue
            done.add((name, wanted))
            todo.extend((Requirement(line), wanted) for line in dist.requires or [])
    return sorted(found.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel_tag(wheel_metadata: str) -> str:
    """The file name's tag: the WHEEL file's tags compressed (py.py-abi-plat.plat) when they form a product."""
    tags = [t for line in wheel_metadata.splitlines() if line.startswith("Tag:") for t in parse_tag(line.split(":", 1)[1].strip())]
    parts = [sorted({getattr(t, field) for t in tags}) for field in ("interpreter", "abi", "platform")]
    if len(tags) == len(parts[0]) * len(parts[1]) * len(parts[2]):
        return "-".join(".".join(p) for p in parts)
    first = tags[0]
    return f"{first.interpreter}-{first.abi}-{first.platform}"


def pack(dist: importlib.metadata.Distribution, out_dir: Path) -> Path:
    """One installed distribution as a wheel in out_dir."""
    info_dir = next(Path(str(f)).parts[0] for f in dist.files or [] if Path(str(f)).parts[0].endswith(".dist-info"))
    site = Path(str(dist.locate_file("")))
    wheel_metadata = (site / info_dir / "WHEEL").read_text()
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    path = out_dir / f"{name}-{dist.version}-{_wheel_tag(wheel_metadata)}.whl"
    skipped = {f"{info_dir}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    record = []
    with zipfile.ZipFile(path, "w") as archive:
        for entry in sorted(str(f) for f in dist.files or []):
            if entry.startswith("../") or entry in skipped or "__pycache__/" in entry or entry.endswith(".pyc"):
                continue
            file = site / entry
            data = file.read_bytes()
            info = zipfile.ZipInfo(entry, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (file.stat().st_mode & 0o777) << 16
            compression = zipfile.ZIP_STORED if entry.endswith(STORED_SUFFIXES) else zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compress_type=compression, compresslevel=1)
            record.append(f"{entry},{_record_hash(data)},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        archive.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n", compress_type=zipfile.ZIP_DEFLATED)
    return path


def wheels_of(requirements: Iterable[str], out_dir: Path, *, leave_out: Iterable[str] = ()) -> list[Path]:
    """Wheels of every installed distribution the requirements need but those named in leave_out, written into
    out_dir (rljob is installed editable: its wheel is the wheelhouse script's to build)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    skip = {canonicalize_name(n) for n in leave_out}
    return [pack(d, out_dir) for d in closure(requirements) if canonicalize_name(d.metadata["Name"]) not in skip]
