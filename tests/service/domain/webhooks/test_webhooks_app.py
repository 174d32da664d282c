"""Webhooks through the real app (RLJOB_TEAM_WEBHOOKS, the leader's dispatcher, GET /v1/webhooks/deliveries) with
receivers on loopback: each team's endpoints get its jobs' phase changes and eval results, signed; a Slack-format
endpoint gets {"text": ...}; one receiver that holds every request never holds another endpoint's deliveries or the
API; admins see delivery state and no endpoint's URL or secret, others get 403 (401 without a token)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from harness.live_server import served
from service.adapters.store import SqlJobStore
from service.adapters.store.webhook_rows import SqlWebhookQueue
from service.app import create_app
from service.cli.main import app as rljob_cli
from service.config import Settings
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState
from service.domain.tokens import TokenService
from service.domain.webhooks.webhook_models import NewDelivery
from tests.service.conftest import Api, add_test_tokens
from tests.service.domain.webhooks.webhook_receiver import Receiver, serving, verify
from tests.service.eval_runs import finish_eval, outcome_rows, submit_eval, suite_hash
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, TOKEN_ADMIN, TOKEN_B, spec_body, wait_for_phase, wait_until

SECRET = "team-a-signing-secret"


def _phases_logged(store: SqlJobStore, job_id: str) -> list[tuple[int, str]]:
    return [(e.seq, e.data["phase"]) for e in store.events_after(0, job_id=job_id, limit=1000) if e.kind == "phase"]


def test_teams_receive_signed_phases_and_eval_results_and_a_held_receiver_holds_nothing_else(
    store: SqlJobStore, settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    with serving(Receiver()) as hook_a, serving(Receiver()) as chat_b, serving(Receiver(then=0)) as held_b:
        webhooks = {
            "team-a": [{"name": "ops", "url": hook_a.url, "secret": SECRET, "events": ["job.phase", "eval.result"]}],
            "team-b": [{"name": "chat", "url": chat_b.url, "format": "slack"}, {"name": "held", "url": held_b.url, "secret": "b-secret"}],
        }
        # A 5 s read timeout: while the held receiver's first attempt is in flight, everything else must go on.
        settings = settings_factory(team_webhooks=webhooks, webhook_timeout_s=5.0, webhook_max_attempts=2, webhook_retry_base_s=0.05)
        add_test_tokens(store)
        launcher, progress = FakeLauncher(), FakeProgress()
        with TestClient(create_app(settings, store=store, launcher=launcher, progress=progress)) as client:
            wait_until(lambda: client.get("/readyz").status_code == 200)
            api = Api(client, store, launcher, progress)

            def deliveries(team: str, token: str = TOKEN_ADMIN) -> list[dict]:
                response = client.get("/v1/webhooks/deliveries", params={"team": team}, headers=api.as_(token))
                assert response.status_code == 200, response.text
                return list(reversed(response.json()["data"]))  # oldest first

            job_b = api.submit(spec_body(tmp_path, name="bee"), token=TOKEN_B)["id"]
            launcher.emit(job_b, ObservedState.RUNNING)
            wait_for_phase(lambda: api.phase(job_b, TOKEN_B), JobPhase.RUNNING)
            logged_b = _phases_logged(store, job_b)
            wait_until(lambda: len(chat_b.received) == len(logged_b))
            # Team b's chat has every phase while the held receiver's first delivery is still in its first attempt.
            assert held_b.holding.is_set()
            held = [d for d in deliveries("team-b") if d["endpoint"] == "held"]
            assert held[0]["state"] == "pending" and held[0]["attempts"] == 0 and len(held) == len(logged_b)
            assert [b["text"].split(" is ")[-1].split(":")[0] for b in chat_b.bodies()] == [p for _, p in logged_b]
            assert all(set(b) == {"text"} for b in chat_b.bodies())  # Slack's shape
            # The API serves meanwhile: a read, and a submission, of either team.
            assert client.get("/v1/jobs", headers=api.as_(TOKEN_B)).status_code == 200
            job_a = api.submit(spec_body(tmp_path, name="ay"))["id"]
            launcher.emit(job_a, ObservedState.RUNNING)
            wait_for_phase(lambda: api.phase(job_a), JobPhase.RUNNING)
            launcher.emit(job_a, ObservedState.SUCCEEDED)
            wait_for_phase(lambda: api.phase(job_a), JobPhase.SUCCEEDED)
            runs = tmp_path / "runs"
            made = submit_eval(api, {"checkpoint": "/models/tiny", "suite": {"name": "arith"}, "output": str(runs)})["id"]
            finish_eval(api, made, outcome_rows([1, 0, 1, 1]), content_hash=suite_hash("arith"), builtin=True, output=runs)
            logged_a = _phases_logged(store, job_a)
            logged_eval = _phases_logged(store, made)
            wait_until(lambda: len(hook_a.received) == len(logged_a) + len(logged_eval))

            bodies = hook_a.bodies()
            assert [(b["seq"], b["data"]["phase"]) for b in bodies if b["job"]["id"] == job_a] == logged_a
            assert {b["team"] for b in bodies} == {"team-a"}  # nothing of team b's
            of_eval = [b for b in bodies if b["job"]["id"] == made]
            assert [b["type"] for b in of_eval] == ["job.phase"] * (len(logged_eval) - 1) + ["eval.result"]
            result = of_eval[-1]["data"]["eval_job"]
            assert result["primary"] == "exact" and result["scores"]["exact"]["pass@1"]["value"] == 0.75
            for request in hook_a.received:
                assert verify(SECRET.encode(), request.headers["x-rljob-signature"], request.body, now=time.time())
                assert request.delivery == request.json["id"]
            assert len(set(hook_a.ids())) == len(hook_a.received)

            # Delivery state: admins only; names, never URLs or secrets.
            assert all(d["state"] == "delivered" and d["attempts"] == 1 for d in deliveries("team-a"))
            assert client.get("/v1/webhooks/deliveries", headers=api.as_(TOKEN_A)).status_code == 403
            assert client.get("/v1/webhooks/deliveries").status_code == 401
            everything = client.get("/v1/webhooks/deliveries", headers=api.as_(TOKEN_ADMIN)).text
            for secret in (hook_a.url, chat_b.url, held_b.url, SECRET, "b-secret", "127.0.0.1"):
                assert secret not in everything
            held_b.release.set()  # let the held attempt end, so the app stops at once


def test_rljob_webhooks_deliveries_shows_admins_the_state_and_tells_others_why_not(
    settings_factory: Callable[..., Settings], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    settings = settings_factory(bootstrap_token=TOKEN_ADMIN, bootstrap_team="ops", bootstrap_admin=True)
    with served(create_app(settings)) as url:
        queue = SqlWebhookQueue(SqlJobStore(settings.effective_database_url).engine)
        queue.cursor()
        now = datetime.now(UTC)
        queue.enqueue(
            [NewDelivery("whd_0123456789abcdef01234567", "team-a", "ops", 9, "job.phase", "rl-abcdefabcdef", "{}", now)],
            cursor=9,
            max_pending=10,
        )
        shown = CliRunner().invoke(rljob_cli, ["--url", url, "--token", TOKEN_ADMIN, "webhooks", "deliveries", "--team", "team-a"])
        assert shown.exit_code == 0, shown.output
        assert "whd_0123456789abcdef01234567" in shown.output and "pending" in shown.output
        as_json = CliRunner().invoke(rljob_cli, ["--url", url, "--token", TOKEN_ADMIN, "webhooks", "deliveries", "-o", "json"])
        assert json.loads(as_json.output)["pending"] == 1
        TokenService(SqlJobStore(settings.effective_database_url)).ensure(TOKEN_A, "team-a")
        refused = CliRunner().invoke(rljob_cli, ["--url", url, "--token", TOKEN_A, "webhooks", "deliveries"])
        assert refused.exit_code != 0 and "only an admin's token" in refused.output and "Traceback" not in refused.output
