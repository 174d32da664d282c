"""The `rljob` CLI through typer's CliRunner against a live service on loopback (local launcher,
fake trainer), plus its messages for bad input, an unreachable service and a rejected token."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import uvicorn
import yaml
from typer.testing import CliRunner

from service.cli.main import app as cli
from service.cli.storage_text import storage_text
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import TOKEN_A, refused_url, spec_body, wait_until
from trainer.contract import RunStorage


def _write_spec(tmp_path: Path, **labels: str) -> Path:
    path = tmp_path / "spec.yaml"
    body = spec_body(tmp_path, labels=labels)
    body["output"] = "${RUNS_DIR}"
    path.write_text(yaml.safe_dump(body))
    return path


def test_submit_follow_list_status_logs(run_cli, live_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    result = run_cli("submit", str(_write_spec(tmp_path, **{"fake-steps": "3"})), "--follow")
    assert result.exit_code == 0, result.output
    job_id = result.output.split("submitted ")[1].split()[0]
    assert "SUCCEEDED" in result.output and "3/3" in result.output and "artifact hf_model" in result.output

    listed = run_cli("list")
    assert listed.exit_code == 0 and job_id in listed.output and "SUCCEEDED" in listed.output
    status = run_cli("status", job_id)
    assert status.exit_code == 0 and "reward_mean=0.3" in status.output and f"runs/{job_id}" in status.output
    # The fake trainer measures its run directory after export, as the pipeline does: followed and shown.
    stored = RunStorage.model_validate(json.loads(run_cli("status", job_id, "-o", "json").stdout)["storage"])
    assert stored.parts["export"] == 7 and stored.complete
    assert f"{job_id}: storage {storage_text(stored)}" in " ".join(result.output.split())
    assert f"storage {storage_text(stored)}" in " ".join(status.output.split())
    # The typed client reads each answer into the service's model and -o json writes it back: nothing is lost or changed.
    headers = {"Authorization": f"Bearer {TOKEN_A}"}
    for args, path in ((("status", job_id), f"/v1/jobs/{job_id}"), (("list",), "/v1/jobs?limit=20")):
        raw = httpx.get(f"{live_url}{path}", headers=headers, timeout=10).json()
        assert json.loads(run_cli(*args, "-o", "json").stdout) == raw
    logs = run_cli("logs", job_id, "--tail", "1")
    assert logs.exit_code == 0 and logs.output.strip().startswith("event run_finished")
    cancel = run_cli("cancel", job_id)
    assert cancel.exit_code == 1 and "already SUCCEEDED" in cancel.output


def test_cancel_and_follow_logs(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    submitted = run_cli("submit", str(_write_spec(tmp_path, **{"fake-gate": "true"})))
    job_id = submitted.output.split("submitted ")[1].split()[0]
    wait_until(lambda: (tmp_path / "runs" / job_id / "starts").exists())
    assert "CANCELLING" in run_cli("cancel", job_id).output
    followed = run_cli("logs", job_id, "-f")  # returns once the process has stopped
    assert followed.exit_code == 0 and "waiting for the gate file" in followed.output
    wait_until(lambda: "CANCELLED" in run_cli("status", job_id).output)


def test_bad_spec_lists_every_field(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "Bad Name", "model": {"name": "x"}, "grpo": {"beta": "high"}, "oops": 1}))
    result = run_cli("submit", str(path))
    assert result.exit_code == 2
    for field in ("name:", "model.source:", "grpo.beta:", "output:", "oops:"):
        assert field in result.output
    assert "Traceback" not in result.output
    missing = run_cli("submit", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2 and "cannot read" in missing.output
    unset = _write_spec(tmp_path)
    result = run_cli("submit", str(unset))
    assert result.exit_code == 2 and "RUNS_DIR is not set" in result.output


def test_unreachable_service_and_rejected_token(run_cli, tmp_path: Path) -> None:
    with refused_url() as dead:
        result = run_cli("list", url=dead)
    assert result.exit_code == 3 and "cannot reach the rljob service" in result.output and "RLJOB_URL" in result.output
    rejected = run_cli("list", token="x" * 40)
    assert rejected.exit_code == 4 and "RLJOB_TOKEN" in rejected.output
    unknown = run_cli("status", "rl-000000000000")
    assert unknown.exit_code == 1 and "no job" in unknown.output


def test_config_file_supplies_url_and_token(live_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"url": live_url, "token": TOKEN_A}))
    monkeypatch.delenv("RLJOB_URL", raising=False)
    monkeypatch.delenv("RLJOB_TOKEN", raising=False)
    monkeypatch.setenv("RLJOB_CONFIG", str(config))
    result = CliRunner().invoke(cli, ["list"], catch_exceptions=False)
    assert result.exit_code == 0 and "ID" in result.output


def test_token_create_and_revoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    state = ["--state-dir", str(tmp_path / "state")]
    created = CliRunner().invoke(cli, ["token", "create", "--team", "team-x", *state], catch_exceptions=False)
    assert created.exit_code == 0, created.output
    token_id = created.output.split()[1]
    secret = created.output.strip().splitlines()[-1]
    assert token_id.startswith("tok_") and secret.startswith("rlj_")
    listed = CliRunner().invoke(cli, ["token", "list", *state], catch_exceptions=False)
    assert token_id in listed.output and "active" in listed.output and secret not in listed.output
    assert CliRunner().invoke(cli, ["token", "revoke", token_id, *state]).exit_code == 0
    again = CliRunner().invoke(cli, ["token", "revoke", token_id, *state])
    assert again.exit_code == 1 and "no active token" in again.output
    bad_team = CliRunner().invoke(cli, ["token", "create", "--team", "Bad Team", *state])
    assert bad_team.exit_code == 2 and "DNS label" in bad_team.output


def test_render_and_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    spec = _write_spec(tmp_path)
    dry = CliRunner().invoke(cli, ["submit", str(spec), "--dry-run"], catch_exceptions=False)
    assert dry.exit_code == 0 and "nothing submitted" in dry.output and str(tmp_path / "runs") in dry.output
    on_cpu = CliRunner().invoke(cli, ["render", str(spec)], catch_exceptions=False)
    assert on_cpu.exit_code in (1, 2) and "error:" in on_cpu.output  # a message, never a traceback
    monkeypatch.setenv("RLJOB_K8S_IMAGE", "registry.example/rljob/trainer:test")
    # The spec's local paths reach a pod only through mounted node directories.
    monkeypatch.setenv("RLJOB_K8S_HOST_PATHS", json.dumps(["/models", str(tmp_path)]))
    tpu = tmp_path / "tpu.yaml"
    body = yaml.safe_load(spec.read_text())
    body["hardware"] = {"accelerator": "v6e-8"}
    tpu.write_text(yaml.safe_dump(body))
    rendered = CliRunner().invoke(cli, ["render", str(tpu), "--job-id", "rl-000000000001"], catch_exceptions=False)
    # The renderer belongs to the k8s adapter; either it renders or the CLI says it is missing.
    assert (rendered.exit_code == 0 and "rl-000000000001" in rendered.output) or "not available" in rendered.output


TUTORIAL = Path(__file__).resolve().parents[3] / "examples" / "tutorial-llama31-8b-v6e8.yaml"


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long messages at the terminal width


def test_dry_run_prints_the_kubernetes_manifests_on_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLJOB_K8S_IMAGE", "registry.example/rljob/trainer:test")
    result = CliRunner().invoke(cli, ["submit", str(TUTORIAL), "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))  # stdout alone is ready for `kubectl apply -f -`
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job"]
    container = docs[1]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/rljob/trainer:test"
    assert container["resources"]["limits"]["google.com/tpu"] == "8"
    assert "nothing submitted" in _flat(result.stderr)


def test_dry_run_without_an_image_says_why_and_still_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLJOB_K8S_IMAGE", raising=False)
    result = CliRunner().invoke(cli, ["submit", str(TUTORIAL), "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "tutorial-llama31-8b"  # the validated spec instead
    note = _flat(result.stderr)
    assert "Kubernetes manifests not shown" in note and "set RLJOB_K8S_IMAGE" in note and "nothing submitted" in note


def test_render_the_tutorial_and_clean_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLJOB_K8S_IMAGE", "registry.example/rljob/trainer:test")
    rendered = CliRunner().invoke(cli, ["render", str(TUTORIAL), "--job-id", "rl-000000000042"], catch_exceptions=False)
    assert rendered.exit_code == 0, rendered.output
    job = list(yaml.safe_load_all(rendered.stdout))[1]
    assert job["metadata"]["name"] == "rl-000000000042"
    assert job["spec"]["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x4"

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "Bad Name", "hardware": {"accelerator": "v6e-8"}}))
    on_cpu = tmp_path / "cpu.yaml"
    on_cpu.write_text(yaml.safe_dump(spec_body(tmp_path)))
    for args, expected in (
        (["render", str(bad)], "name: "),
        (["render", str(tmp_path / "missing.yaml")], "cannot read"),
        (["render", str(on_cpu)], "RLJOB_K8S_HOST_PATHS"),  # valid, but its local paths are not on the cluster
        (["submit", str(bad), "--dry-run"], "output: Field required"),
    ):
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 2 and expected in _flat(result.output), (args, result.output)
        assert "Traceback" not in result.output

    monkeypatch.setenv("RLJOB_K8S_NAMESPACE", "Not A Label")
    bad_settings = CliRunner().invoke(cli, ["render", str(TUTORIAL)], catch_exceptions=False)
    assert bad_settings.exit_code == 2 and "RLJOB_K8S_NAMESPACE" in bad_settings.output
    assert "Traceback" not in bad_settings.output and "errors.pydantic.dev" not in bad_settings.output


def test_serve_prints_the_dashboard_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    for key in ("RLJOB_BOOTSTRAP_TOKEN", "RLJOB_HOST", "RLJOB_PORT", "RLJOB_LAUNCHER", "RLJOB_DATABASE_URL"):
        monkeypatch.delenv(key, raising=False)
    served: list[tuple[str, int]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: served.append((host, port)))
    result = CliRunner().invoke(cli, ["serve", "--state-dir", str(tmp_path / "state"), "--port", "8799"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert served == [("127.0.0.1", 8799)]
    assert "dashboard: http://127.0.0.1:8799/ui/" in _flat(result.output)


def test_health_in_status_and_list_and_the_samples_command(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    submitted = run_cli("submit", str(_write_spec(tmp_path, **{"fake-steps": "3"})), "--follow")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.output.split("submitted ")[1].split()[0]
    assert f"{job_id}: health signal - at step " in _flat(submitted.output)  # live, from the SSE stream

    status = _flat(run_cli("status", job_id).output)
    assert "health signal: at step 3, 50% of prompts had completions with different rewards" in status
    listed = run_cli("list")
    row = listed.output.split(job_id)[1].splitlines()[0]
    assert "HEALTH" in listed.output and "signal" in row and "no-signal" not in row

    latest = run_cli("samples", job_id)
    assert latest.exit_code == 0, latest.output
    text = _flat(latest.output)
    assert f"{job_id} step 3: 1 of 2 prompts with signal" in text and "2 of 4 completions shown" in text
    assert "steps with samples: 1-3" in text
    assert "group 0 exact_answer=1 format_match=0.5 total=1.5" in text
    assert "exact_answer=0 format_match=- total=0" in text and "five (step 3)" in text
    assert text.count("<reasoning>2 plus 2 is 4.") == 1 and "characters left out; --json shows all" in text  # cut
    assert "\ufffd[31m</reasoning><answer>4</answer>" in text  # the end (the answer) kept, its escape defused
    assert "\x1b" not in latest.output

    first = run_cli("samples", job_id, "--step", "1")
    assert first.exit_code == 0 and "five (step 1)" in first.output
    as_json = json.loads(run_cli("samples", job_id, "--json").output)
    assert as_json["step"] == 3 and as_json["steps_available"] == [1, 2, 3]
    assert as_json["samples"]["samples"][0]["completion"].endswith("\x1b[31m</reasoning><answer>4</answer>")  # whole

    missing = run_cli("samples", job_id, "--step", "99")
    assert missing.exit_code == 1 and "no samples for step 99; steps with samples: 1-3" in _flat(missing.output)
    assert "Traceback" not in missing.output
    unknown = run_cli("samples", "rl-000000000000")
    assert unknown.exit_code == 1 and "no job" in unknown.output


def _api_get(url: str, path: str, **params: object) -> object:
    import httpx

    return httpx.get(f"{url}{path}", params=params, headers={"Authorization": f"Bearer {TOKEN_A}"}).json()


STABLE_FIELDS = ("id", "name", "team", "phase", "spec", "labels", "created_at", "run_uri")


def test_output_formats_print_the_apis_objects(run_cli, live_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    spec = str(_write_spec(tmp_path, **{"fake-gate": "true"}))
    created = run_cli("submit", spec, "-o", "json")
    assert created.exit_code == 0, created.output
    job = json.loads(created.stdout)  # stdout holds the JSON alone
    job_id = job["id"]
    assert job["phase"] in ("QUEUED", "LAUNCHING", "RUNNING") and job["spec"]["labels"] == {"fake-gate": "true"}
    wait_until(lambda: (tmp_path / "runs" / job_id / "starts").exists())
    wait_until(lambda: _api_get(live_url, f"/v1/jobs/{job_id}")["phase"] == "RUNNING")

    as_api = _api_get(live_url, f"/v1/jobs/{job_id}")
    as_json = json.loads(run_cli("status", job_id, "-o", "json").stdout)
    as_yaml = yaml.safe_load(run_cli("status", job_id, "--output", "YAML").stdout)
    assert set(as_json) == set(as_api) == set(as_yaml)
    assert {k: as_json[k] for k in STABLE_FIELDS} == {k: as_api[k] for k in STABLE_FIELDS} == {k: as_yaml[k] for k in STABLE_FIELDS}
    assert run_cli("status", job_id, "-o", "name").stdout == f"{job_id}\n"

    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs-2"))
    second = run_cli("submit", str(_write_spec(tmp_path, **{"fake-steps": "1"})), "-o", "name")
    assert second.exit_code == 0 and second.stdout.count("\n") == 1
    second_id = second.stdout.strip()
    wait_until(lambda: _api_get(live_url, f"/v1/jobs/{second_id}")["phase"] == "SUCCEEDED")
    page = _api_get(live_url, "/v1/jobs")
    assert run_cli("list", "-o", "name").stdout.splitlines() == [j["id"] for j in page["data"]] == [second_id, job_id]
    running = json.loads(run_cli("list", "--phase", "running", "-o", "json").stdout)  # any case
    assert [j["id"] for j in running["data"]] == [job_id] and set(running) == set(page)
    assert yaml.safe_load(run_cli("list", "--phase", "RUNNING", "-o", "yaml").stdout)["data"][0]["id"] == job_id

    cancelled = run_cli("cancel", job_id, "-o", "yaml")
    assert cancelled.exit_code == 0 and yaml.safe_load(cancelled.stdout)["phase"] == "CANCELLING"


def test_follow_with_an_output_format_keeps_progress_off_stdout(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    result = run_cli("submit", str(_write_spec(tmp_path, **{"fake-steps": "2"})), "--follow", "-o", "json")
    assert result.exit_code == 0, result.output
    final = json.loads(result.stdout)
    assert final["phase"] == "SUCCEEDED" and final["step"] == 2
    assert f"submitted {final['id']}" in result.stderr and "SUCCEEDED" in result.stderr
    assert json.loads(run_cli("status", final["id"], "-f", "-o", "json").stdout)["id"] == final["id"]


def test_bad_output_and_phase_choices_are_usage_errors(run_cli, live_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    for args, says in (
        (["list", "-o", "xml"], "'xml' is not one of"),
        (["list", "--phase", "DONE"], "'DONE' is not one of"),
        (["submit", str(_write_spec(tmp_path)), "--dry-run", "-o", "json"], "leave out -o"),
    ):
        result = run_cli(*args)
        assert result.exit_code == 2 and says in _flat(result.output), (args, result.output)
        assert "Traceback" not in result.output
    choices = run_cli("list", "--phase", "DONE").output
    assert all(f"'{phase.value.lower()}'" in choices for phase in JobPhase)  # the domain's phases, all of them
    assert _api_get(live_url, "/v1/jobs")["data"] == []  # refused before anything reached the service


SERVE_TOKEN = "rlj_serve-console-token-" + "0123456789abcdef" * 2


@pytest.mark.parametrize("terminal", [False, True])
def test_serve_prints_its_token_only_to_a_terminal(terminal: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rljob serve > serve.log` keeps its console in a file: the token stays in client.yaml (0600), not in the log."""
    from service.cli import operator_commands

    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: None)
    monkeypatch.setattr(operator_commands, "_stdout_is_terminal", lambda: terminal)
    monkeypatch.setenv("RLJOB_BOOTSTRAP_TOKEN", SERVE_TOKEN)
    result = CliRunner().invoke(cli, ["serve", "--state-dir", str(tmp_path / "state"), "--port", "8799"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    client_file = tmp_path / "state" / "client.yaml"
    assert (SERVE_TOKEN in result.output) is terminal
    assert str(client_file) in "".join(result.output.split())  # the console wraps a long path anywhere
    assert SERVE_TOKEN in client_file.read_text() and client_file.stat().st_mode & 0o777 == 0o600
