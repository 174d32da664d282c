"""A job's reward functions on the local launcher cannot write the service's state (issue 51, part 2).

Found with a real tiny job: a reward wrote an admin token into the service's SQLite database, and that token then
read another team's job. Here the real service (HTTP, SQLite, the local launcher) runs a job whose stand-in trainer
calls the job's rewards through the real reward sandbox, as train_rl's stand-ins do (harness/fake_trainer.py,
fake-rewards): one reward plants an admin token in the service's database, one writes a file into its state
directory. Both calls fail in the worker (Landlock lets it write only beneath its own directory), the planted token
is refused by the API, and nothing appeared in the state directory. With Landlock removed from the worker (once, by
hand), both calls succeed and the planted admin token lists jobs (200): this test then fails."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path

import httpx

from harness.live_server import served
from service.app import create_app
from service.config import Settings
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import spec_body, wait_until

TOKEN_A = "rljob_team-a-token-for-the-reward-confinement-test"
REWARDS = """
import hashlib, os, sqlite3, uuid

def plant_admin_token(prompts, completions, **kwargs):
    db = sqlite3.connect({database!r}, timeout=5)
    db.execute(
        "INSERT INTO api_tokens (id, token_hash, team, name, admin, created_at) VALUES (?, ?, 'team-b', 'planted', 1, ?)",
        (uuid.uuid4().hex[:32], hashlib.sha256({planted!r}.encode()).hexdigest(), "2026-12-05 00:00:00.000000"),
    )
    db.commit()
    return [1.0] * len(completions)

def write_state_dir(prompts, completions, **kwargs):
    with open(os.path.join({state_dir!r}, "planted-by-a-reward"), "w") as f:
        f.write("a reward wrote here")
    return [1.0] * len(completions)

def score(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]
"""


def test_a_jobs_rewards_cannot_plant_a_token_in_the_services_database_or_write_its_state(
    tmp_path: Path, settings_factory: Callable[..., Settings]
) -> None:
    settings = settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a")
    state_dir = Path(settings.state_dir).expanduser().resolve()
    database = settings.effective_database_url.removeprefix("sqlite:///")
    planted = "rljob_" + secrets.token_urlsafe(24)
    rewards = tmp_path / "rewards.py"
    rewards.write_text(REWARDS.format(database=database, planted=planted, state_dir=str(state_dir)))
    body = spec_body(
        tmp_path,
        labels={"fake-rewards": "true", "fake-steps": "1"},
        grpo={"rewards": {"functions_path": str(rewards), "functions": ["plant_admin_token", "write_state_dir", "score"]}},
    )
    with served(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        as_a = {"Authorization": f"Bearer {TOKEN_A}"}
        created = client.post("/v1/jobs", json=body, headers=as_a)
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        wait_until(
            lambda: client.get(f"/v1/jobs/{job_id}", headers=as_a).json()["phase"] in {p.value for p in JobPhase if p.is_terminal()}, 60
        )
        assert client.get(f"/v1/jobs/{job_id}", headers=as_a).json()["phase"] == JobPhase.SUCCEEDED.value

        run = json.loads((tmp_path / "runs" / job_id / "reward_calls.json").read_text())
        assert run["isolation"]["filesystem_confined"], run["isolation"]
        calls = run["calls"]
        assert calls["score"] == {"outcome": "ok", "scores": [1.0], "error": None}
        assert calls["plant_admin_token"]["outcome"] == "error", calls["plant_admin_token"]
        assert calls["write_state_dir"]["outcome"] == "error" and "Permission denied" in calls["write_state_dir"]["error"]

        assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {planted}"}).status_code == 401
        assert client.get(f"/v1/jobs/{job_id}", headers=as_a).status_code == 200  # the service's own writes go on
    assert not (state_dir / "planted-by-a-reward").exists()
