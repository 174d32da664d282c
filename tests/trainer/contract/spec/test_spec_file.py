"""One spec-file reader: `python -m trainer plan` and `rljob submit` name the same problems for the same file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli.main import app as rljob
from trainer.cli import main as trainer_main
from trainer.contract import ExitCode

BAD_FILES = {
    "unreadable": ("missing.yaml", None),
    "unset-variable": ("spec.yaml", "name: x\noutput: ${RLJOB_TEST_SURELY_UNSET}\n"),
    "bad-yaml": ("spec.yaml", "name: [unclosed\n"),
    "bad-json": ("spec.json", '{"name": '),
    "not-a-mapping": ("spec.yaml", "- name: x\n"),
    "bad-fields": ("spec.yaml", "name: Bad Name\nmodel: {name: x}\noops: 1\n"),
}


def _problem_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.startswith("  ")]


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_both_command_lines_name_the_same_problems(tmp_path: Path, capsys, monkeypatch, case: str) -> None:
    monkeypatch.delenv("RLJOB_TEST_SURELY_UNSET", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no rljob config from the real home
    name, text = BAD_FILES[case]
    path = tmp_path / name
    if text is not None:
        path.write_text(text)

    assert trainer_main(["plan", "--spec", str(path)]) == ExitCode.INVALID_SPEC
    from_trainer = _problem_lines(capsys.readouterr().err)
    # Refused before any request: the URL is never dialled.
    result = CliRunner().invoke(
        rljob, ["--url", "http://127.0.0.1:9", "--token", "x" * 40, "submit", str(path)], env={"COLUMNS": "500"}
    )  # rich wraps at 80 otherwise
    assert result.exit_code == 2, result.output
    from_rljob = _problem_lines(result.output)

    assert from_trainer and from_trainer == from_rljob
