"""CLI conventions that need no running service: --version, the exit codes in --help, options that
mirror a service setting read the same RLJOB_* variable, choices come from the domain and settings,
and `token list -o`."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from service.cli.client import CLI_EXIT_MEANINGS, CliExit
from service.cli.main import app as cli
from service.config import Settings


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines at the terminal width


def _commands(command: Any, path: str = "rljob") -> Iterator[tuple[str, Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


def test_version_comes_from_the_installed_package() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"rljob {importlib.metadata.version('rljob')}\n"


def test_help_lists_every_exit_code() -> None:
    text = _flat(CliRunner().invoke(cli, ["--help"]).output)
    assert set(CLI_EXIT_MEANINGS) == set(CliExit)
    for code, meaning in CLI_EXIT_MEANINGS.items():
        assert f"{code.value} {meaning}" in text


def test_every_option_that_mirrors_a_setting_reads_its_variable() -> None:
    mirrored = []
    for path, command in _commands(typer.main.get_command(cli)):
        for param in command.params:
            if param.param_type_name == "option" and param.name in Settings.model_fields:
                assert param.envvar == f"RLJOB_{param.name.upper()}", f"{path} --{param.name}"
                mirrored.append(f"{path} {param.name}")
    # Not vacuous: serve's flags and the token commands' database flags are all among them.
    for name in ("host", "port", "state_dir", "database_url", "launcher", "max_concurrent_jobs"):
        assert f"rljob serve {name}" in mirrored
    for sub in ("create", "revoke", "list"):
        assert {f"rljob token {sub} state_dir", f"rljob token {sub} database_url"} <= set(mirrored)


def test_serve_refuses_a_bad_variable_by_its_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RLJOB_LAUNCHER", "docker")
    result = CliRunner().invoke(cli, ["serve", "--state-dir", str(tmp_path)])
    assert result.exit_code == CliExit.BAD_INPUT
    text = _flat(result.output)
    assert "RLJOB_LAUNCHER" in text and "'docker' is not one of 'local', 'kubernetes'" in text
    monkeypatch.delenv("RLJOB_LAUNCHER")
    flag = CliRunner().invoke(cli, ["serve", "--launcher", "docker", "--state-dir", str(tmp_path)])
    assert flag.exit_code == CliExit.BAD_INPUT and "'docker' is not one of 'local', 'kubernetes'" in _flat(flag.output)
    assert not list(tmp_path.iterdir())  # nothing was written


def test_token_list_output_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RLJOB_STATE_DIR", str(tmp_path / "state"))  # through the option's envvar
    created = [CliRunner().invoke(cli, ["token", "create", "--team", team, "--name", f"n-{team}"]) for team in ("ta", "tb")]
    ids = [r.output.split()[1] for r in created]
    secrets = [r.output.strip().splitlines()[-1] for r in created]
    assert CliRunner().invoke(cli, ["token", "revoke", ids[0]]).exit_code == 0

    as_json = CliRunner().invoke(cli, ["token", "list", "-o", "json"])
    assert as_json.exit_code == 0, as_json.output
    records = json.loads(as_json.stdout)
    assert sorted(r["id"] for r in records) == sorted(ids)
    by_id = {r["id"]: r for r in records}
    assert by_id[ids[0]]["revoked_at"] and by_id[ids[1]]["revoked_at"] is None
    assert set(by_id[ids[1]]) == {"id", "team", "name", "admin", "created_at", "revoked_at"}
    assert by_id[ids[1]]["team"] == "tb" and by_id[ids[1]]["name"] == "n-tb"
    assert not any(secret in as_json.output for secret in secrets)
    assert yaml.safe_load(CliRunner().invoke(cli, ["token", "list", "-o", "yaml"]).stdout) == records
    names = CliRunner().invoke(cli, ["token", "list", "-o", "name"]).stdout.splitlines()
    assert names == [r["id"] for r in records]
