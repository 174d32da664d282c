"""constraints.txt is the one home of every version: what the venv holds is what it pins.

scripts/bootstrap.sh installs with `-c constraints.txt`, so an unpinned dependency would float to whatever
PyPI has that day and CI would test a different set than the images ship.
"""

from __future__ import annotations

import importlib.metadata
import re
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Installed by bootstrap.sh before the constraints apply (it pins its own version there).
PINNED_ELSEWHERE = {"uv"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str) -> dict[str, str]:
    pins = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {raw!r} is not an exact pin"
            pins[_norm(name.split("[")[0])] = version.strip()
    return pins


def unpinned(pins: dict[str, str], installed: dict[str, str]) -> list[str]:
    return sorted(
        f"{name}=={version} (pinned: {pins.get(name, 'nothing')})" for name, version in installed.items() if pins.get(name) != version
    )


def test_every_installed_distribution_is_pinned_at_its_version():
    pins = read_pins((ROOT / "constraints.txt").read_text())
    # The venv's own site-packages, not all of sys.path: `import setuptools` (another test module does, at
    # collection) appends its vendored packages' directory, whose dist-infos nobody installed.
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {_norm(d.metadata["Name"]): d.version for d in importlib.metadata.distributions(path=site)}
    installed = {n: v for n, v in installed.items() if n not in PINNED_ELSEWHERE | {"rljob"}}
    assert unpinned(pins, installed) == []


def test_an_unpinned_or_drifted_package_is_named():
    assert unpinned({"a": "1"}, {"a": "1", "b": "2", "c": "3"}) == ["b==2 (pinned: nothing)", "c==3 (pinned: nothing)"]
    assert unpinned({"a": "1"}, {"a": "2"}) == ["a==2 (pinned: 1)"]
