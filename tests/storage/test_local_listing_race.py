"""LocalDirStore.list while a writer renames and removes entries under it, as Orbax does when it finalizes
`N.orbax-checkpoint-tmp` into `N` and the trainer's retention removes old steps: the listing leaves out what vanished
mid-walk instead of failing (CI once saw the preemption test's poll of the latest checkpoint raise FileNotFoundError
from a file Orbax had just renamed away)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from trainer.storage.local import LocalDirStore


def _churn(root: Path, stop: threading.Event) -> None:
    step = 0
    while not stop.is_set():
        tmp = root / f"{step}.orbax-checkpoint-tmp"
        (tmp / "state").mkdir(parents=True)
        for i in range(8):
            (tmp / "state" / f"part-{i}").write_bytes(b"x" * 16)
        os.rename(tmp, root / str(step))
        shutil.rmtree(root / str(step - 2), ignore_errors=True)
        step += 1


def test_a_listing_under_a_renaming_writer_never_fails_and_lists_only_files(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    root.mkdir()
    stop = threading.Event()
    writer = threading.Thread(target=_churn, args=(root, stop), daemon=True)
    writer.start()
    store, listings = LocalDirStore(), 0
    try:
        for _ in range(400):
            for info in store.list(str(root)):
                assert Path(info.uri).name.startswith("part-"), info  # files only, never a directory
            listings += 1
    finally:
        stop.set()
        writer.join(timeout=10)
    assert listings == 400
