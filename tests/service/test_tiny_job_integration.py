"""The real trainer's tiny CPU job, submitted over HTTP to the service with the local launcher.

Slow (MaxText on CPU, minutes): CI runs it with `-m slow`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.domain.records.phases import JobPhase
from tests.service.service_helpers import wait_for_phase, wait_until
from tests.service.tiny_service import AUTH, TINY_WAIT_S, embedded_settings, offline, tiny_body


@pytest.mark.slow
@pytest.mark.timeout(2400)  # make-tiny (up to 600 s) and the job (TINY_WAIT_S) end with their own messages first
def test_tiny_job_runs_to_success_through_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_dir: Path, tiny_output: Path
) -> None:
    # The worker's tiny model and shared output (tests/conftest.py): the job converts, or takes the checkpoint an
    # earlier tiny run of this worker converted into the output's conversion cache.
    body = tiny_body(tiny_dir, tiny_output)
    offline(monkeypatch)
    settings = embedded_settings(tmp_path)
    auth = AUTH
    with TestClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        job_id = client.post("/v1/jobs", json=body, headers=auth).json()["id"]

        def phase() -> str:
            return client.get(f"/v1/jobs/{job_id}", headers=auth).json()["phase"]

        try:
            wait_for_phase(phase, JobPhase.SUCCEEDED, timeout_s=TINY_WAIT_S)
        except AssertionError:
            print(client.get(f"/v1/jobs/{job_id}/logs", params={"tail_lines": 80}, headers=auth).text)
            raise
        job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
        assert job["step"] == job["total_steps"] == body["grpo"]["num_batches"]
        assert job["metrics"]["reward_mean"] is not None and job["artifacts"]
        assert {"convert", "train", "export"} <= set(job["stage_times"])
        points = client.get(f"/v1/jobs/{job_id}/metrics", headers=auth).json()["points"]
        assert [p["step"] for p in points if p["kind"] == "train"] == list(range(1, job["total_steps"] + 1))
        # Every step carries the scalars Tunix writes after its loss (trainer/progress/train_rl_events.py).
        assert all("actor/train/grad_norm" in p["values"] for p in points if p["kind"] == "train"), points
        # train_rl evaluated the 2 eval rows (batch_size 2 x num_test_batches 1) before and after training;
        # each point carries its Wilson interval, and the change is paired over the same 2 rows.
        evaluation = job["train_evals"]
        assert evaluation["status"] == "available", evaluation
        for label in ("before", "after"):
            point = evaluation[label]
            assert point["n"] == 2 and point["label"] == label, point
            low, high = point["ci95"]
            assert 0 <= low <= point["accuracy"] <= high <= 1 and high - low > 0.3  # two rows say little
        assert evaluation["difference"]["of"] == "after" and evaluation["difference"]["n"] == 2
        # Three steps of a random model: signal, never a claim of improvement.
        assert job["health"]["verdict"] not in ("improving", "learning"), job["health"]

        # Issue 53: a rerun (what `rljob rerun` submits: the job's stored spec, the team left to the token, a new
        # idempotency key) samples step 1 exactly as the first run did: the spec's seed (here its default) fixes the
        # rows' order and every rollout's key. Without the keys, step 1 still matched (Tunix drew PRNGKey(0) at every
        # step); test_slow_shared_prefill.py shows each step drawing its own.
        spec = client.get(f"/v1/jobs/{job_id}", headers=auth).json()["spec"]
        spec.pop("team")
        rerun = client.post("/v1/jobs", json=spec, headers={**auth, "Idempotency-Key": "rerun-of-" + job_id}).json()["id"]
        assert rerun != job_id
        wait_for_phase(lambda: client.get(f"/v1/jobs/{rerun}", headers=auth).json()["phase"], JobPhase.SUCCEEDED, timeout_s=TINY_WAIT_S)

        def step_one(of: str) -> list[tuple[int, str]]:
            samples = client.get(f"/v1/jobs/{of}/samples", params={"step": 1}, headers=auth).json()["samples"]["samples"]
            return [(sample["group"], sample["completion"]) for sample in samples]

        assert step_one(job_id) and step_one(rerun) == step_one(job_id)
        repro = [client.get(f"/v1/jobs/{of}/repro", headers=auth).json()["seeds"] for of in (job_id, rerun)]
        assert repro[0] == repro[1] and repro[0]["sampling"]["value"] == 42
