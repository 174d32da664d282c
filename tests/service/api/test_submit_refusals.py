"""Every bad spec is refused at submit over REST (422 naming the field), and nothing is stored or
launched: non-finite numbers (also as JSON's NaN/Infinity literals), strings MaxText would resolve,
control characters, numbers beyond the limits, hardware the TPU table lacks, and, with the local
launcher, a TPU this machine does not have."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.adapters.local import LocalProcessLauncher, procs
from service.adapters.local.host_tpu import HostTpu
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.config import Settings
from tests.service.conftest import Api, add_test_tokens
from tests.service.service_fakes import FakeProgress
from tests.service.service_helpers import TOKEN_A, spec_body, wait_until
from trainer.contract.spec import values as limits

V6E8 = {"accelerator": "v6e-8", "chips_per_vm": 8, "rollout_engine": "vllm"}


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """SQLite only: every refusal here comes before the store is written (the spec's validation, the fit check, the
    launcher's capacity check), and what a store does with an accepted job has its tests on both backends."""
    return f"sqlite:///{tmp_path / 'rljob.db'}"


def _post_raw(api: Api, text: str):
    headers = {**api.as_(TOKEN_A), "Content-Type": "application/json"}
    return api.client.post("/v1/jobs", content=text.encode(), headers=headers)


def _refused_at(response, loc: tuple[str, ...]) -> str:
    assert response.status_code == 422, response.text
    found = {tuple(str(p) for p in item["loc"]): item["msg"] for item in response.json()["detail"]}
    assert loc in found, found
    return found[loc]


def _nothing_stored(api: Api) -> None:
    assert api.launcher.launched == []
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e309"])
def test_json_non_finite_literals_are_refused_naming_the_field(api: Api, tmp_path: Path, literal: str) -> None:
    # Python's json (FastAPI's parser) accepts NaN and Infinity, and reads 1e309 as infinity.
    text = json.dumps(spec_body(tmp_path, grpo={"beta": 0.5})).replace("0.5", literal)
    assert literal in text
    assert "finite" in _refused_at(_post_raw(api, text), ("body", "grpo", "beta"))
    _nothing_stored(api)


@pytest.mark.parametrize(
    ("field", "value", "loc"),
    [
        ("dataset", {"subset": "${oc.env:HF_TOKEN}"}, ("body", "dataset", "subset")),
        ("dataset", {"train_split": "train${oc.env:RLJOB_DATABASE_URL}"}, ("body", "dataset", "train_split")),
        ("output", "/runs/${oc.env:HF_TOKEN}", ("body", "output")),
        ("output", "/runs/a\u0000b", ("body", "output")),
        ("output", "/runs/a\nb", ("body", "output")),
        ("model", {"source": "/models/tiny\u0007"}, ("body", "model", "source")),
        ("grpo", {"batch_size": 10**12}, ("body", "grpo", "batch_size")),
        ("grpo", {"num_batches": 2**70}, ("body", "grpo", "num_batches")),
        ("hardware", {**V6E8, "chips_per_vm": 10**9}, ("body", "hardware", "chips_per_vm")),
        ("hardware", {**V6E8, "accelerator": "v6e-3"}, ("body", "hardware", "accelerator")),
        ("hardware", {**V6E8, "accelerator": "v6e-16"}, ("body", "hardware", "chips_per_vm")),
        ("hardware", {**V6E8, "rollout_data_parallelism": 16}, ("body", "hardware", "rollout_data_parallelism")),
        # issue 39's rl.yml settings (tests/trainer/contract/spec/test_rl_settings.py has each rule)
        ("grpo", {"eval_mode": "maj@4"}, ("body", "grpo", "eval_mode")),
        ("grpo", {"eval_mode": "maj"}, ("body", "grpo", "eval_mode")),
        ("grpo", {"eval_batch_size": -1}, ("body", "grpo", "eval_batch_size")),
        ("grpo", {"max_seq_token_per_tpu": 16}, ("body", "grpo", "max_seq_token_per_tpu")),
        ("dataset", {"shuffle_seed": 2**32}, ("body", "dataset", "shuffle_seed")),
        # issue 53's job seed: grain's range, and an integer only
        ("seed", 2**32, ("body", "seed")),
        ("seed", -1, ("body", "seed")),
        ("seed", "${oc.env:HF_TOKEN}", ("body", "seed")),
        ("dataset", {"processor_path": "/p/${oc.env:HF_TOKEN}.py"}, ("body", "dataset", "processor_path")),
        ("hardware", {**V6E8, "reshard_chunk_size": 0}, ("body", "hardware", "reshard_chunk_size")),
    ],
)
def test_bad_values_are_refused_at_submit(api: Api, tmp_path: Path, field: str, value: object, loc: tuple[str, ...]) -> None:
    response = api.client.post("/v1/jobs", json=spec_body(tmp_path, **{field: value}), headers=api.as_(TOKEN_A))
    _refused_at(response, loc)
    _nothing_stored(api)


def test_best_export_without_an_intermediate_evaluation_is_refused_at_submit(api: Api, tmp_path: Path) -> None:
    body = spec_body(tmp_path, grpo={"num_batches": 4, "num_test_batches": 1, "eval_interval": 0}, export={"checkpoint": "best"})
    message = _refused_at(api.client.post("/v1/jobs", json=body, headers=api.as_(TOKEN_A)), ("body",))
    assert "export.checkpoint=best" in message and "grpo.eval_interval" in message, message
    _nothing_stored(api)


def test_the_openapi_schema_carries_the_patterns_and_limits(api: Api) -> None:
    schemas = api.client.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["DatasetSpec"]["properties"]["subset"]["pattern"] == limits.SUBSET_PATTERN
    assert schemas["DatasetSpec"]["properties"]["eval_split"]["pattern"] == limits.SPLIT_PATTERN
    assert schemas["JobCreate"]["properties"]["output"]["pattern"] == limits.LOCATION_PATTERN
    assert schemas["GrpoSpec"]["properties"]["num_batches"]["maximum"] == limits.MAX_NUM_BATCHES
    assert "v6e-8" in schemas["HardwareSpec"]["properties"]["accelerator"]["enum"]


# ---- the local launcher: the accelerator must be this machine's ------------------------------------


class CountingProbe:
    def __init__(self, host: HostTpu) -> None:
        self.host, self.calls = host, 0

    def __call__(self) -> HostTpu:
        self.calls += 1
        return self.host


MakeLocalApi = Callable[[HostTpu], tuple[Api, CountingProbe]]


@pytest.fixture
def local_api(
    store: SqlJobStore, tmp_path: Path, fake_trainer_command: list[str], settings_factory: Callable[..., Settings]
) -> Iterator[MakeLocalApi]:
    clients: list[TestClient] = []

    def make(host: HostTpu) -> tuple[Api, CountingProbe]:
        add_test_tokens(store)
        probe = CountingProbe(host)
        launcher = LocalProcessLauncher(tmp_path / "jobs", fake_trainer_command, poll_interval_s=0.05, probe_tpu=probe)
        client = TestClient(create_app(settings_factory(), store=store, launcher=launcher, progress=FakeProgress()))
        client.__enter__()
        clients.append(client)
        wait_until(lambda: client.get("/readyz").status_code == 200)
        return Api(client, store, launcher, FakeProgress()), probe  # type: ignore[arg-type]

    yield make
    for client in clients:
        client.__exit__(None, None, None)
    for process_file in (tmp_path / "jobs").glob("*/process.json"):  # never leave a trainer behind
        procs.signal_group(json.loads(process_file.read_text())["pid"], signal.SIGKILL)


def test_a_tpu_job_is_refused_on_a_machine_without_that_tpu(local_api, tmp_path: Path) -> None:
    api, probe = local_api(HostTpu(chips=0, accelerator_type=None))
    response = api.client.post("/v1/jobs", json=spec_body(tmp_path, hardware=V6E8), headers=api.as_(TOKEN_A))
    message = _refused_at(response, ("body", "hardware", "accelerator"))
    assert "v6e-8" in message and "has none" in message and "Kubernetes" in message
    assert api.client.get("/v1/jobs", headers=api.as_(TOKEN_A)).json()["count"] == 0
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())  # nothing started

    cpu = api.client.post("/v1/jobs", json=spec_body(tmp_path, name="on-cpu"), headers=api.as_(TOKEN_A))
    assert cpu.status_code == 201, cpu.text  # cpu jobs keep running locally
    assert probe.calls == 1  # probed once, at start


def test_a_tpu_job_runs_on_a_machine_that_is_that_tpu(local_api, tmp_path: Path) -> None:
    api, probe = local_api(HostTpu(chips=8, accelerator_type="v6e-8", type_source="TPU_ACCELERATOR_TYPE"))
    response = api.client.post("/v1/jobs", json=spec_body(tmp_path, hardware=V6E8), headers=api.as_(TOKEN_A))
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    wait_until(lambda: (tmp_path / "jobs" / job_id / "spec.json").exists())
    other = api.client.post(
        "/v1/jobs", json=spec_body(tmp_path, name="v5e", hardware={**V6E8, "accelerator": "v5e-8"}), headers=api.as_(TOKEN_A)
    )
    assert "this machine runs v6e-8 jobs" in _refused_at(other, ("body", "hardware", "accelerator"))
    assert probe.calls == 1
