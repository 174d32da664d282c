"""The Kueue release docs/deploy-gke.md installs is one the emulator's version table knows
(harness/podrun/kueue/versions.py), and the guide names every version the emulator runs."""

from __future__ import annotations

import re

from harness.podrun.kueue import versions as kueue_versions
from harness.podrun.pods.images import ROOT

DOC = (ROOT / "docs" / "deploy-gke.md").read_text()


def pinned(doc: str) -> list[str]:
    return re.findall(r"kubernetes-sigs/kueue/releases/download/(v[0-9.]+)/manifests\.yaml", doc)


def test_the_installed_kueue_is_a_version_the_emulator_runs():
    versions = pinned(DOC)
    assert versions, "the guide installs Kueue from a pinned release"
    for v in versions:
        assert v in kueue_versions.VERSIONS, f"{v} is not in {kueue_versions.VERSIONS}"


def test_the_guide_names_each_supported_line():
    for v in kueue_versions.VERSIONS:
        line = ".".join(v.split(".")[:2]) + ".x"
        assert line in DOC, line
