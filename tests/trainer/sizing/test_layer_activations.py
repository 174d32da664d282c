"""Issue 67 §1: each job's update keeps its layers' saved activations in HBM where the fit estimate leaves room, and
MaxText's own config loader reads the trainer's command as keeping them (or offloading them, as rl.yml does)."""

from __future__ import annotations

import json

import pytest

from bench.estimate.fit_calibration_tpu import RESULT, model_shape_of, spec_of
from tests.trainer.spec_edit import with_field
from trainer.contract import JobSpec, RunLayout
from trainer.sizing.fit import estimate_fit, estimate_job_fit, keeps_layers_in_hbm
from trainer.sizing.layer_activations import KEPT_IN_HBM_ARGS, layer_activation_args
from trainer.sources import resolve_model
from trainer.stages.train import build_train_command

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

SHAPES = {s["shape"]: s for s in json.loads(RESULT.read_text())["shapes"]}
FOUR = sorted(name.split("=")[0] for name in KEPT_IN_HBM_ARGS)


def _bench(shape: str, batch_size: int, layer_activations: str = "auto") -> tuple[JobSpec, object]:
    entry = SHAPES[shape]
    spec = spec_of(entry)
    spec = spec.model_copy(
        update={
            "grpo": spec.grpo.model_copy(update={"batch_size": batch_size}),
            "hardware": spec.hardware.model_copy(update={"layer_activations": layer_activations}),
        }
    )
    return spec, model_shape_of(entry)


def test_auto_keeps_them_where_the_kept_estimate_fits_with_room_and_offloads_where_it_would_be_tight():
    """SmolLM2-135M on one v5e chip at 4x8, 256+512: kept, the update needs 8.7 GB of the 16.9 XLA may allocate; at 8x8
    15.8 GB, above 90% of it ("tight"), where offloading needs 11.3 GB ("fits")."""
    spec, shape = _bench("smollm2-135m-b4", 4)
    assert keeps_layers_in_hbm(spec, shape) and layer_activation_args(spec, shape) == list(KEPT_IN_HBM_ARGS)
    assert estimate_fit(spec, shape, layers_in_hbm=True).verdict == "fits"
    spec, shape = _bench("smollm2-135m-b4", 8)
    assert estimate_fit(spec, shape, layers_in_hbm=True).verdict == "tight"
    assert estimate_fit(spec, shape).verdict == "fits"
    assert not keeps_layers_in_hbm(spec, shape) and layer_activation_args(spec, shape) == []


def test_offload_is_rl_yml_s_and_hbm_is_kept_even_where_auto_would_not():
    spec, shape = _bench("smollm2-135m-b4", 4, "offload")
    assert layer_activation_args(spec, shape) == []
    spec, shape = _bench("smollm2-135m-b4", 8, "hbm")
    assert layer_activation_args(spec, shape) == list(KEPT_IN_HBM_ARGS)


def test_an_hbm_choice_that_does_not_fit_is_refused_with_what_would():
    """SmolLM2-360M at 6x8: kept, 17.6 GB; offloaded, 11.6 GB. The estimate the service checks at submit is the one
    the trainer will run, and its refusal says the layers' placement is what does not fit."""
    spec, shape = _bench("smollm2-360m-b4", 6, "hbm")
    refused = estimate_fit(spec, shape, layers_in_hbm=keeps_layers_in_hbm(spec, shape))
    assert refused.verdict == "does-not-fit"
    assert "keeping each layer's activations in HBM is what does not fit" in refused.message
    assert "hardware.layer_activations auto or offload it needs ~10.8 GiB" in refused.message
    spec, shape = _bench("smollm2-360m-b4", 6, "auto")
    assert not keeps_layers_in_hbm(spec, shape)


def test_cpu_has_nothing_to_choose(tiny_spec_dict):
    spec = JobSpec.model_validate(with_field(tiny_spec_dict, "hardware.layer_activations", "hbm"))
    assert layer_activation_args(spec, None) == [] and not keeps_layers_in_hbm(spec, None)


def test_the_submit_estimate_is_the_policy_the_trainer_runs(tiny_spec_dict):
    """estimate_job_fit (what the service checks and shows) counts the layers kept exactly when the trainer keeps them."""
    tpu = with_field(tiny_spec_dict, "hardware", {"accelerator": "v5e-1", "chips_per_vm": 1, "rollout_engine": "jax"})
    kept = JobSpec.model_validate(tpu)
    offloaded = JobSpec.model_validate(with_field(tpu, "hardware.layer_activations", "offload"))
    kept_fit, offloaded_fit = estimate_job_fit(kept), estimate_job_fit(offloaded)
    assert kept_fit is not None and offloaded_fit is not None
    assert kept_fit.per_chip.activations > offloaded_fit.per_chip.activations
    assert "kept in HBM" in kept_fit.message and "kept in HBM" not in offloaded_fit.message


@pytest.mark.parametrize("choice, saved, offloaded", [("auto", FOUR, []), ("offload", [], FOUR)])
def test_maxtext_reads_the_train_command_as_keeping_or_offloading_the_four(maxtext_loader, tiny_spec_dict, choice, saved, offloaded):
    """MaxText's config loader on the trainer's real train command, then MaxText's own split of the remat policy's
    names (maxtext/utils/maxtext_utils.py get_save_and_offload_names, what the decoder's get_remat_policy builds
    jax.checkpoint_policies.save_and_offload_only_these_names from)."""
    from maxtext.utils.maxtext_utils import get_save_and_offload_names

    tpu = with_field(tiny_spec_dict, "hardware", {"accelerator": "v5e-1", "chips_per_vm": 1, "rollout_engine": "jax"})
    spec = JobSpec.model_validate(with_field(tpu, "hardware.layer_activations", choice))
    config = maxtext_loader(build_train_command(spec, RunLayout(spec.output, "rl-layers00001"), resolve_model(spec)))
    assert config.remat_policy == "custom"
    save, offload = get_save_and_offload_names(config)
    assert (sorted(save), sorted(offload)) == (saved, offloaded)
