"""Local-directory adapter: the embedded default and tests."""

from __future__ import annotations

import builtins
import hashlib
import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path

from trainer.contract.spec.locations import local_path

from .port import ObjectInfo, StorageError


def _path(uri: str) -> Path:
    path = local_path(uri)
    if not path.startswith("/"):
        raise StorageError(f"{path!r} is not an absolute local path")
    return Path(path)


def file_md5(path: Path) -> str:
    """ "md5:<hex>" of a local file: the form GcsStore reports from object metadata, so they compare."""
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "md5:" + h.hexdigest()


def _info(path: Path) -> ObjectInfo:
    st = path.stat()
    return ObjectInfo(str(path), st.st_size, updated_s=st.st_mtime)


class LocalDirStore:
    def exists(self, uri: str) -> bool:
        return _path(uri).exists()

    def read_bytes(self, uri: str) -> bytes:
        try:
            return _path(uri).read_bytes()
        except FileNotFoundError as e:
            raise StorageError(f"{uri} does not exist") from e

    def write_bytes(self, uri: str, data: bytes, *, if_absent: bool = False) -> bool:
        path = _path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write to a sibling temp file and rename so readers never see half an object.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            if if_absent:
                try:
                    os.link(tmp, path)  # atomic create-if-absent
                except FileExistsError:
                    return False
                return True
            os.replace(tmp, path)
            return True
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def append_bytes(self, uri: str, data: bytes) -> None:
        path = _path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as f:
            f.write(data)

    def delete(self, uri: str) -> None:
        path = _path(uri)
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def list(self, prefix_uri: str, *, limit: int | None = None) -> list[ObjectInfo]:
        root = _path(prefix_uri)
        if root.is_file():
            return [_info(root)]
        if not root.is_dir():
            return []
        # A writer may rename or remove entries while this walks (Orbax finalizes `N.orbax-checkpoint-tmp` into `N`):
        # what vanished between the directory read and its stat is not listed, as a bucket listing would not show it.
        out: builtins.list[ObjectInfo] = []
        for dirpath, _, names in os.walk(root):  # a directory removed mid-walk is skipped (onerror=None)
            for name in names:
                path = Path(dirpath) / name
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append(ObjectInfo(str(path), st.st_size, updated_s=st.st_mtime))
                    if limit is not None and len(out) >= limit:
                        return sorted(out, key=lambda o: o.uri)
        return sorted(out, key=lambda o: o.uri)

    def upload_file(self, local_path: str, uri: str) -> ObjectInfo:
        dest = _path(uri)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if Path(local_path).resolve() != dest.resolve():
            tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}")
            shutil.copyfile(local_path, tmp)
            os.replace(tmp, dest)  # readers never see a half-copied file
        return _info(dest)

    def upload_dir(self, local_dir: str, uri: str) -> builtins.list[ObjectInfo]:
        dest = _path(uri)
        if Path(local_dir).resolve() != dest.resolve():
            shutil.copytree(local_dir, dest, dirs_exist_ok=True)
        return self.list(uri)

    def download_dir(self, uri: str, local_dir: str) -> builtins.list[str]:
        src = _path(uri)
        if not src.is_dir():
            raise StorageError(f"{uri} is not a directory")
        if src.resolve() != Path(local_dir).resolve():
            shutil.copytree(src, local_dir, dirs_exist_ok=True)
        return [str(p) for p in Path(local_dir).rglob("*") if p.is_file()]

    def check_writable(self, uri: str) -> None:
        path = _path(uri)
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".rljob-probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"probe")
            probe.unlink()
        except OSError as e:
            raise StorageError(f"output location {uri} is not writable ({e.strerror}); choose a directory this user can write") from e
