"""A real small model, offline: SmolLM2-135M-Instruct from its GGUF file, through MaxText and back.

SmolLM2 ties its input and output embeddings and has no Llama 3.1 RoPE scaling, so it exercises the
settings rljob derives from config.json (hf_model.py) where the tiny model cannot. One build and one
conversion are shared by every test here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import REPO
from trainer.contract import JobSpec, RunLayout
from trainer.runner import StageCommand, run_stage_command
from trainer.sources import resolve_model
from trainer.stages.convert import build_convert_command
from trainer.stages.export import build_export_command

pytestmark = pytest.mark.slow
CHECK_ENV = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu"}


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("smollm2")
    built = subprocess.run(
        [sys.executable, "-m", "trainer", "make-model", "smollm2-135m", "--out", str(work / "model")],
        cwd=REPO,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    spec = JobSpec.model_validate(
        {
            "name": "smollm2",
            "model": {"source": str(work / "model"), "dtype": "float32"},
            "output": str(work / "runs"),
            "hardware": {"accelerator": "cpu", "chips_per_vm": 1, "rollout_engine": "jax"},
        }
    )
    layout = RunLayout(spec.output, "rl-smollm2test01")
    model = resolve_model(spec)
    run_stage_command(build_convert_command(spec, layout, model), work / "convert.log")
    items = f"{layout.converted_dir}/0/items"
    # Export the converted checkpoint itself (no training): a pure HF -> MaxText -> HF round trip.
    export = build_export_command(spec, layout, model, actor_step=0, local_source=spec.model.source)
    args = [f"load_parameters_path={items}" if a.startswith("load_parameters_path=") else a for a in export.args]
    run_stage_command(StageCommand(export.module, tuple(args), export.env), work / "export.log")
    return {"dir": work / "model", "items": items, "export": Path(layout.export_dir), "model": model}


@pytest.fixture(scope="module")
def parity(smollm2) -> dict:
    """MaxText's forward vs HF's and the jax rollout's cached forward vs MaxText's, from one process."""
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("maxtext_parity_check.py")),
            str(smollm2["dir"]),
            smollm2["items"],
            *smollm2["model"].args(),
        ],
        cwd=REPO,
        env=dict(os.environ, **CHECK_ENV),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_smollm2s_pad_is_its_eos_and_every_chat_prompt_token_stays_in_the_mask(smollm2):
    """SmolLM2 ships pad == EOS == <|im_end|>, which ends every chat turn: Tunix's `ids != pad_id` masks hid each
    from the model; the left-padding rule of trainer/rollout/stop_token.py keeps them."""
    from transformers import AutoTokenizer

    from tests.trainer.pad_and_eos import pad_and_eos

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2["dir"]))
    seen = pad_and_eos(tokenizer)
    assert seen["pad"] == seen["eos"] == tokenizer.convert_tokens_to_ids("<|im_end|>"), seen
    assert seen["pad_ids_in_prompt"] >= 2, seen  # the system and the user turn each end with it
    assert seen["tokens_tunix_masks_in"] == seen["prompt_tokens"] - seen["pad_ids_in_prompt"], seen
    assert seen["tokens_rljob_masks_in"] == seen["prompt_tokens"], seen


def test_make_model_writes_the_real_tied_smollm2_with_its_tokenizer(smollm2):
    config = json.loads((smollm2["dir"] / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["num_hidden_layers"] == 30 and config["vocab_size"] == 49152
    summary = json.loads((smollm2["dir"] / "rljob-model.json").read_text())
    assert summary["parameters"] == "134515008" and "dequantised Q4_1" in summary["note"]
    tokenizer = json.loads((smollm2["dir"] / "tokenizer_config.json").read_text())
    assert tokenizer["eos_token"] == "<|im_end|>" and tokenizer["bos_token"] == "<|im_start|>"
    assert "<|im_start|>assistant" in (smollm2["dir"] / "chat_template.jinja").read_text()
    assert smollm2["model"].overrides["logits_via_embedding"] == "true"
    assert smollm2["model"].overrides["rope_use_scale"] == "false"


def test_tied_checkpoint_round_trips_with_identical_weights_and_config(smollm2):
    from safetensors.torch import load_file

    original = load_file(str(smollm2["dir"] / "model.safetensors"))
    exported = load_file(str(smollm2["export"] / "model.safetensors"))
    assert "lm_head.weight" not in exported  # tied: the output projection is the embedding
    assert sorted(original) == sorted(exported)
    for name, tensor in original.items():
        assert (tensor == exported[name].float()).all(), name
    config = json.loads((smollm2["export"] / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["vocab_size"] == 49152
    assert config["rope_parameters"]["rope_theta"] == 100000.0 and config["eos_token_id"] == 2


def test_maxtext_forward_matches_the_hf_model(parity):
    result = parity["hf_forward"]
    # MaxText 0.2.5 multiplies by a bf16 copy of a tied embedding (layers/embeddings.py:
    # attend_on_embedding), so raw logits differ at bf16 precision (measured 0.09 on a scale of 36);
    # with the same rounding on the HF side they agree to fp32 precision (measured 4.9e-5).
    assert result["max_abs_diff_bf16_tied_table"] < 1e-3, result
    assert result["max_abs_diff"] < 0.5, result


def test_the_jax_rollouts_cached_forward_matches_maxtext(parity):
    result = parity["cached_rollout"]
    assert result["argmax_agree"] and result["max_abs_diff"] < 1e-3 * max(1.0, result["logit_scale"]), result
