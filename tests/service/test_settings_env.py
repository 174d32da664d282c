"""Settings from the environment: a wrong form names the variable, the reason and the form it takes,
and a list of paths is accepted plain (`/data` or `/data,/scratch`) as well as as JSON."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from service.adapters.k8s.settings import K8sSettings
from service.cli.client import CliExit
from service.cli.main import app as cli
from service.config import Settings
from service.settings_env import SettingsInvalid, read_settings


@pytest.mark.parametrize(
    ("value", "paths"),
    [
        ("/data", ["/data"]),
        ("/data,/scratch", ["/data", "/scratch"]),
        (" /data , /scratch/ ", ["/data", "/scratch"]),
        ('["/data", "/scratch"]', ["/data", "/scratch"]),
        ("", []),
    ],
)
def test_host_paths_read_plain_or_as_json(monkeypatch: pytest.MonkeyPatch, value: str, paths: list[str]) -> None:
    monkeypatch.setenv("RLJOB_K8S_HOST_PATHS", value)
    assert read_settings(K8sSettings).host_paths == paths


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RLJOB_K8S_HOST_PATHS", '["/data"', "starts with '[' but is not a JSON list"),
        ("RLJOB_K8S_HOST_PATHS", "data", "'data' must be an absolute path"),
        ("RLJOB_K8S_TEAM_SERVICE_ACCOUNTS", "team-a=sa", "not valid JSON"),
        ("RLJOB_K8S_BACKOFF_LIMIT", "three", "valid integer"),
        # inf or 1e12 seconds made a loop's wait raise OverflowError in its thread, which stopped without a word.
        ("RLJOB_LOCAL_POLL_INTERVAL_S", "inf", "finite number"),
        ("RLJOB_PROGRESS_POLL_INTERVAL_S", "nan", "finite number"),
        ("RLJOB_CANCEL_GRACE_S", "1e12", "less than or equal to 86400"),
        ("RLJOB_K8S_REQUEST_TIMEOUT_S", "inf", "finite number"),
        ("RLJOB_K8S_WATCH_RESYNC_INTERVAL_S", "1e12", "less than or equal to 86400"),
    ],
)
def test_a_bad_setting_names_its_variable_and_form(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsInvalid) as raised:
        read_settings(K8sSettings if "_K8S_" in variable else Settings)
    message = str(raised.value)
    assert f"  {variable}: " in message and says in message, message
    if variable == "RLJOB_K8S_HOST_PATHS":
        assert 'comma-separated (/data,/scratch) or a JSON list (["/data", "/scratch"])' in message
    if variable == "RLJOB_K8S_TEAM_SERVICE_ACCOUNTS":
        assert "expected a JSON object" in message
    assert "EnvSettingsSource" not in message


def test_a_secret_setting_is_named_but_its_value_is_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLJOB_TRAINER_COMMAND", "python -m trainer")
    with pytest.raises(SettingsInvalid, match=r"RLJOB_TRAINER_COMMAND: not valid JSON .*expected a JSON list of strings"):
        read_settings(Settings)
    monkeypatch.delenv("RLJOB_TRAINER_COMMAND")
    with pytest.raises(SettingsInvalid) as raised:
        read_settings(Settings, bootstrap_token=["hunter2-secret"])
    assert "RLJOB_BOOTSTRAP_TOKEN" in str(raised.value) and "hunter2" not in str(raised.value)


def test_rljob_serve_with_a_bad_kubernetes_setting_says_which_and_starts_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("RLJOB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RLJOB_LAUNCHER", "kubernetes")
    monkeypatch.setenv("RLJOB_K8S_HOST_PATHS", '["/data"')
    result = CliRunner().invoke(cli, ["serve", "--port", "0"])
    assert result.exit_code == CliExit.BAD_INPUT, result.output
    assert "RLJOB_K8S_HOST_PATHS" in result.output and "Traceback" not in result.output
    assert "unexpected" not in result.output and not (tmp_path / "state" / "client.yaml").exists()
