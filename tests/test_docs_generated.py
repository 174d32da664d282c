"""Every generated documentation page is what scripts/render_docs.py gives from its sources today (run in-process),
so a changed setting, spec field, phase transition or bench result file cannot leave its page behind."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _render_docs() -> ModuleType:
    """scripts/ is not a package: load the script by path, as `python scripts/render_docs.py` runs it."""
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "scripts" / "render_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("render_docs", module)
    spec.loader.exec_module(module)
    return module


render_docs = _render_docs()


@pytest.mark.parametrize("page", sorted(render_docs.PAGES), ids=lambda page: str(page.relative_to(ROOT)))
def test_the_page_is_what_its_sources_give(page: Path) -> None:
    assert page.exists(), f"{page.relative_to(ROOT)} is missing; run `{render_docs.REGENERATE}`"
    wanted = render_docs.PAGES[page](page.read_text())
    assert page.read_text() == wanted, f"{page.relative_to(ROOT)} differs from what its sources give; run `{render_docs.REGENERATE}`"


def test_check_names_a_stale_page_and_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    stale = tmp_path / "spec.md"
    stale.write_text("# an old page\n")
    monkeypatch.setattr(render_docs, "REPO", tmp_path)
    monkeypatch.setattr(render_docs, "PAGES", {stale: lambda _text: render_docs.spec_page()})
    assert render_docs.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "spec.md differs" in err and render_docs.REGENERATE in err
    assert render_docs.main([]) == 0 and render_docs.main(["--check"]) == 0


def test_a_spec_field_without_a_description_is_refused() -> None:
    from trainer.contract import JobSpec

    class Bare(JobSpec):
        undocumented_knob: int = 1

    with pytest.raises(ValueError, match="undocumented_knob"):
        render_docs.spec_page(Bare)


def test_the_phase_diagram_draws_every_allowed_transition_and_no_other() -> None:
    from service.domain.records.phases import ALLOWED_TRANSITIONS

    arrows = [line.strip().split(" --> ") for line in render_docs.phase_diagram().splitlines() if " --> " in line]
    drawn = {(a, b) for a, b in arrows if "[*]" not in (a, b)}
    assert drawn == {(a.value, b.value) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets}
