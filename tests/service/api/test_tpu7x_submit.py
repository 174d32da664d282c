"""TPU7x (Ironwood) slices through the real app (fakes only at the launcher): the tutorial's job is accepted on a
single-host tpu7x-8 and a multi-host tpu7x-16, its fit estimate counted per JAX device (two per TPU7x chip: 8 on
tpu7x-8's 4 chips, each holding half of the chip's 192 GiB), and the submit-time estimate scales from v5e by TPU7x's
documented rates; a rollout split that only counts chips is refused, one that counts devices accepted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient

from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, wait_until
from trainer.sizing.tpu_memory import GIB

TUTORIAL = Path(__file__).resolve().parents[3] / "examples" / "tutorial-llama31-8b-v6e8.yaml"


def _tutorial_on(tmp_path: Path, accelerator: str, **hardware: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(TUTORIAL.read_text())
    body["output"] = str(tmp_path / "runs")
    body["hardware"] = {**body["hardware"], "accelerator": accelerator, "chips_per_vm": 4, **hardware}
    return body


def test_the_tutorial_job_is_accepted_on_tpu7x_8_and_counted_per_device(api: Api, tmp_path: Path) -> None:
    job = api.submit(_tutorial_on(tmp_path, "tpu7x-8"))
    stored = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(TOKEN_A)).json()
    fit = stored["fit_estimate"]
    assert fit["verdict"] == "fits" and fit["accelerator"] == "tpu7x-8"
    assert fit["trainer_devices"] == 8 and fit["rollout_devices"] == 8
    assert fit["capacity_bytes_per_chip"] == 96 * GIB
    # Scaled from v5e by one TPU7x device's share of the chip's 2307 TFLOP/s and 7380 GB/s, as the work is shared.
    detail = json.dumps(stored["estimate"])
    assert "by tpu7x's documented peak bf16 FLOP/s (1153.5 vs 197 TFLOP/s)" in detail and "(3690 vs 819 GB/s" in detail
    assert api.launcher.launched == [job["id"]]


def test_the_tutorial_job_is_accepted_on_multi_host_tpu7x_16(api: Api, tmp_path: Path) -> None:
    job = api.submit(_tutorial_on(tmp_path, "tpu7x-16"))
    fit = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_(TOKEN_A)).json()["fit_estimate"]
    # 8 chips on two VMs = 16 devices, half the trainer's and half the rollout's (MaxText's fractions on several VMs).
    assert fit["trainer_devices"] == 8 and fit["rollout_devices"] == 8 and fit["verdict"] == "fits"
    assert api.launcher.launched == [job["id"]]


def test_a_rollout_split_over_tpu7x_8s_eight_devices_is_accepted_and_one_over_its_four_chips_refused(api: Api, tmp_path: Path) -> None:
    api.submit(_tutorial_on(tmp_path, "tpu7x-8", rollout_data_parallelism=2, rollout_tensor_parallelism=4))
    body = _tutorial_on(tmp_path, "tpu7x-8", rollout_data_parallelism=1, rollout_tensor_parallelism=4)
    response = api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    assert "8 device(s)" in response.text


def test_a_tpu7x_estimate_has_no_cost(api: Api, tmp_path: Path) -> None:
    estimate = api.client.post("/v1/jobs?dry_run=estimate", json=_tutorial_on(tmp_path, "tpu7x-8"), headers=api.as_(TOKEN_A))
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["cost_usd"] is None and estimate.json()["chip_hours"]["high"] > 0


def test_tpu7x_has_no_price_so_a_dollar_budget_refuses_it(
    store: SqlJobStore, settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """rljob's price table has no TPU7x list price: a team with a dollar budget cannot submit a job the budget could
    not count (before, it was admitted and spent dollars no budget saw)."""
    add_test_tokens(store)
    budgets = json.dumps({"team-a": {"usd": 1000}})
    settings = settings_factory(bootstrap_token=TOKEN_A, bootstrap_team="team-a", team_budgets=budgets)
    app = create_app(settings, store=store, launcher=FakeLauncher(), progress=FakeProgress())
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        headers = {"Authorization": f"Bearer {TOKEN_A}"}
        refused = client.post("/v1/jobs", json=_tutorial_on(tmp_path, "tpu7x-8"), headers=headers)
        assert refused.status_code == 422, refused.text
        assert "rljob has no price for this job's accelerator and capacity" in refused.text
        assert client.get("/v1/jobs", headers=headers).json()["count"] == 0
        on_v6e = client.post("/v1/jobs", json=_tutorial_on(tmp_path, "v6e-8", chips_per_vm=8), headers=headers)
        assert on_v6e.status_code == 201, on_v6e.text  # priced: the same budget admits it


def test_a_capacity_without_a_price_is_refused_under_a_dollar_budget_though_another_is_priced(
    store: SqlJobStore, settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """A price table that prices v6e on-demand but not spot: a job that may land on spot could spend dollars the
    budget would not see (usage prices a job only where every capacity it ran on has a price), so it is refused."""
    add_test_tokens(store)
    settings = settings_factory(
        bootstrap_token=TOKEN_A,
        bootstrap_team="team-a",
        team_budgets=json.dumps({"team-a": {"usd": 1000}}),
        usage_prices_usd_per_chip_hour={"v6e": {"on-demand": 2.7}},
    )
    app = create_app(settings, store=store, launcher=FakeLauncher(), progress=FakeProgress())
    with TestClient(app) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        headers = {"Authorization": f"Bearer {TOKEN_A}"}
        either = _tutorial_on(tmp_path, "v6e-8", chips_per_vm=8, capacity=["spot", "on-demand"])
        refused = client.post("/v1/jobs", json=either, headers=headers)
        assert refused.status_code == 422, refused.text
        assert "no price for this job's accelerator and capacity (spot)" in refused.text
        priced = client.post("/v1/jobs", json=_tutorial_on(tmp_path, "v6e-8", chips_per_vm=8, capacity="on-demand"), headers=headers)
        assert priced.status_code == 201, priced.text
