"""TPU7x (Ironwood) slices through the real app (fakes only at the launcher): the tutorial's job is accepted on a
single-host tpu7x-8 and a multi-host tpu7x-16, its fit estimate counted per JAX device (two per TPU7x chip: 8 on
tpu7x-8's 4 chips, each holding half of the chip's 192 GiB), and the submit-time estimate scales from v5e by TPU7x's
documented rates; a rollout split that only counts chips is refused, one that counts devices accepted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.service.conftest import Api
from tests.service.service_helpers import TOKEN_A
from trainer.sizing.tpu_memory import GIB

TUTORIAL = Path(__file__).resolve().parents[2] / "examples" / "tutorial-llama31-8b-v6e8.yaml"


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
