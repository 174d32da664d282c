"""Eval jobs on a TPU slice (issue 64): `accelerator` on POST /v1/evals and `eval.accelerator` on a training job make
eval jobs whose hardware is that slice (the JAX engine's, trainer/evals/jax_sampler.py); a multi-VM slice or an
unknown name is a 422 naming the field; and the attached evals' field leaves old specs' hashes where they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from tests.service.conftest import Api
from tests.service.domain.evals.test_attached_evals import TEAM_A, _attached, _reconciler, _spec
from tests.service.domain.evals.test_eval_submit import _refused, _succeeded_with_export
from tests.service.eval_runs import submit_eval
from tests.service.service_helpers import TOKEN_A, ManualClock
from trainer.contract import JobSpec, RunLayout

pytest_plugins = ["tests.service.domain.evals.test_attached_evals"]
# A small Llama's config.json, so the fit estimate reads the shape the JAX engine would hold (tests/service's specs name
# llama3.1-8b otherwise: 30 GiB in float32, more than a v5e chip, and refused at submit as the last test shows).
SMALL_LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1024,
    "tie_word_embeddings": False,
}


def _small_model(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(SMALL_LLAMA))
    return directory


def test_an_eval_on_a_tpu_slice_is_a_tpu_job_with_the_jax_engine(api: Api, tmp_path: Path) -> None:
    trained = _succeeded_with_export(api, tmp_path)
    _small_model(Path(RunLayout(str(tmp_path / "runs"), trained).export_dir))
    made = submit_eval(api, {"checkpoint": f"{trained}:export", "suite": {"name": "arith"}, "accelerator": "v5e-1"})
    spec = api.client.get(f"/v1/jobs/{made['id']}", headers=api.as_(TOKEN_A)).json()["spec"]
    assert (spec["hardware"]["accelerator"], spec["hardware"]["chips_per_vm"]) == ("v5e-1", 1)
    assert made["eval_job"]["engine"] == "jax"
    on_cpu = submit_eval(api, {"checkpoint": f"{trained}:base", "suite": {"name": "arith"}})
    assert on_cpu["eval_job"]["engine"] == "transformers"
    for bad, says in (("v6e-16", "one VM"), ("h100", "neither cpu nor a TPU slice")):
        loc, message = _refused(api, {"checkpoint": f"{trained}:export", "suite": {"name": "arith"}, "accelerator": bad})
        assert loc == ["body", "accelerator"] and says in message, message
    # The base model is llama3.1-8b by name: the engine's float32 copy does not fit one v5e chip, and submit says so.
    loc, message = _refused(api, {"checkpoint": f"{trained}:base", "suite": {"name": "arith"}, "accelerator": "v5e-1"})
    assert loc == ["body", "hardware", "accelerator"] and "evaluate it on cpu" in message and "params 29.9" in message, message


def test_attached_evals_run_on_the_training_jobs_eval_accelerator(
    service: JobService, ports: JobPorts, clock: ManualClock, store: SqlJobStore, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, accelerator="v5e-1")
    model = spec.model.model_copy(update={"source": str(_small_model(tmp_path / "small"))})
    parent, _ = service.submit(TEAM_A, spec.model_copy(update={"model": model}))
    _reconciler(service, ports, clock).reconcile_once()
    base = _attached(store, parent.id)["base"]
    assert (base.spec.hardware.accelerator, base.spec.hardware.chips_per_vm) == ("v5e-1", 1)
    with pytest.raises(ValidationError, match="one VM"):
        _spec(tmp_path, accelerator="v6e-16")


# The hash of this spec as commit 2172bd2 computed it, before eval.accelerator existed: pinned, so a change that moved
# every old hash alike (which comparing two specs built by today's code cannot see) fails here.
HASH_BEFORE_EVAL_ACCELERATOR = "8e2335f31b1294075e9c8828d2a8f947672afd797ea2c898455395f968996a48"


def test_eval_accelerator_at_its_default_leaves_the_spec_hash_alone() -> None:
    body = {
        "name": "trained",
        "model": {"name": "llama3.1-8b", "source": "/models/tiny"},
        "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        "output": "/tmp/runs",
        "grpo": {"num_batches": 6, "checkpoint_period": 2},
        "eval": {"suite": {"name": "arith"}},
    }
    assert JobSpec.model_validate(body).content_hash() == HASH_BEFORE_EVAL_ACCELERATOR
    explicit = JobSpec.model_validate({**body, "eval": {**body["eval"], "accelerator": "cpu"}})
    assert explicit.content_hash() == HASH_BEFORE_EVAL_ACCELERATOR
    on_tpu = JobSpec.model_validate({**body, "eval": {**body["eval"], "accelerator": "v5e-1"}})
    assert on_tpu.content_hash() != HASH_BEFORE_EVAL_ACCELERATOR
