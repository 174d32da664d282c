"""hardware.capacity on the local launcher: on-demand and spot run on this machine; reservation and
flex-start (GKE capacity) are refused at submit over REST, naming hardware.capacity, nothing stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.adapters.local import LocalProcessLauncher
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body, wait_until
from trainer.contract import JobSpec


def _hardware(capacity: str) -> dict[str, object]:
    hardware: dict[str, object] = {"accelerator": "cpu", "rollout_engine": "jax", "capacity": capacity}
    if capacity == "reservation":
        hardware["reservation"] = "tpu-res-1"
    return hardware


@pytest.fixture
def local_api(
    store: SqlJobStore, tmp_path: Path, fake_trainer_command: list[str], settings_factory: Callable[..., Settings]
) -> Iterator[Api]:
    add_test_tokens(store)
    launcher = LocalProcessLauncher(tmp_path / "jobs", fake_trainer_command, poll_interval_s=0.05)
    with TestClient(create_app(settings_factory(), store=store, launcher=launcher, progress=FakeProgress())) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield Api(client, store, launcher, FakeProgress())


@pytest.mark.parametrize("capacity", ["reservation", "flex-start"])
def test_gke_capacity_is_refused_by_the_local_launcher(local_api: Api, tmp_path: Path, capacity: str) -> None:
    body = spec_body(tmp_path, hardware=_hardware(capacity))
    response = local_api.client.post("/v1/jobs", json=body, headers=local_api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    (item,) = response.json()["detail"]
    assert item["loc"] == ["body", "hardware", "capacity"]
    assert f"capacity {capacity} is GKE capacity" in item["msg"] and "on-demand" in item["msg"]
    assert local_api.client.get("/v1/jobs", headers=local_api.as_(TOKEN_A)).json()["count"] == 0
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())


@pytest.mark.parametrize("capacity", ["on-demand", "spot"])
def test_on_demand_and_spot_are_submittable_locally(tmp_path: Path, fake_trainer_command: list[str], capacity: str) -> None:
    launcher = LocalProcessLauncher(tmp_path / "jobs", fake_trainer_command)
    launcher.check_submittable(JobSpec.model_validate(spec_body(tmp_path, hardware=_hardware(capacity))))


def test_a_capacity_set_runs_locally_as_its_first_kind_this_machine_offers(local_api: Api, tmp_path: Path) -> None:
    """[flex-start, spot, on-demand]: flex-start is GKE's, spot runs here; the job's placement says spot, with no flavor."""
    body = spec_body(tmp_path, hardware={**_hardware("spot"), "capacity": ["flex-start", "spot", "on-demand"]})
    response = local_api.client.post("/v1/jobs", json=body, headers=local_api.as_(TOKEN_A))
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]

    def placed() -> dict[str, object] | None:
        placement: dict[str, object] | None = local_api.client.get(f"/v1/jobs/{job_id}", headers=local_api.as_(TOKEN_A)).json()["placement"]
        return placement

    wait_until(lambda: placed() is not None)
    placement = placed()
    assert placement is not None and (placement["capacity"], placement["flavor"]) == ("spot", None)


def test_a_capacity_set_of_gke_kinds_only_is_refused_locally(local_api: Api, tmp_path: Path) -> None:
    body = spec_body(tmp_path, hardware={**_hardware("reservation"), "capacity": ["reservation", "flex-start"]})
    response = local_api.client.post("/v1/jobs", json=body, headers=local_api.as_(TOKEN_A))
    assert response.status_code == 422, response.text
    (item,) = response.json()["detail"]
    assert item["loc"] == ["body", "hardware", "capacity"] and "[reservation, flex-start] is GKE capacity" in item["msg"]
