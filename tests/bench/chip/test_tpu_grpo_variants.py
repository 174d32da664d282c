"""bench/chip/tpu_grpo.py's variants: a run of a bench shape in float32 (`run --precision float32`, issue 66 §2's
agreement by precision) is labelled apart, built as a float32 job, and told beside the trainer's run of the shape."""

from __future__ import annotations

import copy
import json

import pytest

from bench.chip.tpu_grpo import REPO, RESULT, collect_variants, label_of, parse_label, spec_for
from bench.readme_render.tpu_grpo import render_tpu_grpo, render_tpu_precision_variants

GRPO = json.loads((REPO / "bench" / "results" / RESULT).read_text())
# The precision variants, kept with the runs of the shapes they pair with (measured at an earlier commit's trainer files).
KEPT = json.loads((REPO / "bench" / "results" / "tpu_grpo_precision_variants.json").read_text())


def test_a_label_names_the_shape_the_batch_and_the_precision():
    assert parse_label(label_of("qwen3-0.6b", 1, "float32")) == ("qwen3-0.6b", 1, "float32")
    assert parse_label(label_of("smollm2-135m", 4, None)) == ("smollm2-135m", 4, None)
    assert parse_label(label_of("smollm2-135m", 4, "bfloat16")) == ("smollm2-135m", 4, "bfloat16")
    assert [parse_label(s["shape"])[2] for s in GRPO["shapes"]] == [None] * len(GRPO["shapes"])


def test_the_float32_variant_is_a_float32_job(tmp_path):
    bf16, fp32 = spec_for("smollm2-135m", tmp_path), spec_for("smollm2-135m", tmp_path, precision="float32")
    assert (bf16.model.dtype, bf16.model.resolved_compute_dtype("v5e-1")) == ("bfloat16", "bfloat16")
    assert (fp32.model.dtype, fp32.model.resolved_compute_dtype("v5e-1")) == ("float32", "float32")
    assert fp32.model_dump(exclude={"model"}) == bf16.model_dump(exclude={"model"})
    compute = spec_for("qwen3-0.6b", tmp_path, 1, precision="float32-compute")
    assert (compute.model.dtype, compute.model.resolved_compute_dtype("v5e-1")) == ("bfloat16", "float32")
    assert parse_label(label_of("qwen3-0.6b", 1, "float32-compute")) == ("qwen3-0.6b", 1, "float32-compute")


def test_a_precision_variant_is_told_beside_the_shape_it_varies():
    result = copy.deepcopy(GRPO)
    base = next(s for s in result["shapes"] if s["shape"] == "smollm2-135m-b4")
    variant = copy.deepcopy(base)
    variant["shape"] = label_of("smollm2-135m", 4, "float32")
    variant["settings"] |= {"weight_dtype": "float32", "compute_dtype": "float32"}
    variant["maxtext_overrides"] = ["matmul_precision=highest"]
    variant["steady"] = base["steady"] | {"step_s": base["steady"]["step_s"] * 2}
    variant["agreement"] = {"sampler_trainer/train/logp_diff_mean": {"1": 0.001, "2": 0.002}}
    result["variants"] = [variant]
    text = render_tpu_grpo(result)
    assert (
        "smollm2-135m-b4-float32 (weights float32, compute float32, layers kept in HBM, `matmul_precision=highest`; not what the "
        "trainer runs) "
        f"against smollm2-135m-b4: step {variant['steady']['step_s']} s against {base['steady']['step_s']} s (2.00x)" in text
    )
    assert "sampler-trainer agreement mean |Δ log p| 0.0010-0.0020 nats per token over 2 steps" in text


def test_a_later_sessions_variants_join_only_the_trainer_files_they_ran(tmp_path):
    """Variants collected into the committed result pair with its shapes only while its trainer files are unchanged."""
    stale = tmp_path / RESULT
    stale.write_text(json.dumps(GRPO | {"trainer_commit": "115ebfd"}))  # before issue 51's sandbox changes
    with pytest.raises(SystemExit, match="changed since 115ebfd"):
        collect_variants(tmp_path / "variants", stale)
    assert json.loads(stale.read_text())["variants"] == GRPO["variants"]


def test_a_later_sessions_variant_says_so():
    result = copy.deepcopy(GRPO)
    base = next(s for s in result["shapes"] if s["shape"] == "smollm2-360m-b4")
    variant = copy.deepcopy(base) | {"shape": label_of("smollm2-360m", 4, "float32"), "session": {"collected_at": "2026-12-08"}}
    result["variants"] = [variant]
    assert "(a later session at the same trainer files, collected 2026-12-08)" in render_tpu_grpo(result)


def test_each_precision_runs_its_maxtext_settings_and_a_mislabelled_run_is_refused(tmp_path):
    """The logits-float32 variant is the shape's own spec with model.logits_dtype float32; a run is collected under a
    precision only where its train command leaves MaxText reading that precision's settings. The kept variants, which
    appended logits_dot_in_fp32=true after the trainer's settings, pass as the spec's setting would; a run whose
    command does not (an `--override` run named after a precision it did not run) is not collected."""
    from bench.chip.tpu_grpo import PRECISIONS, _checked_label

    bf16, logits = spec_for("smollm2-360m", tmp_path), spec_for("smollm2-360m", tmp_path, precision="logits-float32")
    assert logits.model.logits_dtype == "float32" and bf16.model.logits_dtype == "bfloat16"
    assert logits.model_dump(exclude={"model"}) == bf16.model_dump(exclude={"model"})
    assert PRECISIONS["logits-float32"].overrides == ()
    collected = {v["shape"]: v for v in KEPT["variants"]}
    for label, variant in collected.items():
        assert _checked_label(variant) is variant, label
    kept = collected["smollm2-360m-b4-logits-float32"]
    mislabelled = copy.deepcopy(kept) | {"command": [a for a in kept["command"] if a != "logits_dot_in_fp32=true"]}
    with pytest.raises(SystemExit, match="its label's are \\{'logits_dot_in_fp32': 'true'\\}"):
        _checked_label(mislabelled)
    trainers_own = copy.deepcopy(mislabelled) | {"command": [*mislabelled["command"], "logits_dot_in_fp32=false"]}
    with pytest.raises(SystemExit, match="MaxText read \\{'logits_dot_in_fp32': 'false'\\}"):
        _checked_label(trainers_own)
    with pytest.raises(SystemExit, match="no precision 'bf8'"):
        _checked_label(mislabelled | {"shape": "smollm2-360m-b4-bf8"})
    # Today's trainer runs the variant through the spec: its own command carries the setting, nothing appended.
    today = next(s for s in GRPO["shapes"] if s["shape"] == "smollm2-360m-b4")
    as_spec = copy.deepcopy(today) | {"shape": "smollm2-360m-b4-logits-float32", "maxtext_overrides": []}
    as_spec["command"] = [a.replace("logits_dot_in_fp32=false", "logits_dot_in_fp32=true") for a in today["command"]]
    assert _checked_label(as_spec) is as_spec
    told = render_tpu_grpo(GRPO | {"variants": [as_spec]})
    said = "layers kept in HBM, `logits_dot_in_fp32=true` from the spec; not what the trainer runs) against smollm2-360m-b4"
    assert f"smollm2-360m-b4-logits-float32 (weights bfloat16, compute bfloat16, {said}" in told


def test_the_kept_variants_are_told_beside_the_runs_they_pair_with_not_todays():
    """Each kept variant is rendered against its own commit's run of the shape (KEPT's), which today's result does not
    replace: the kept block names that commit, and its ratios are to KEPT's runs."""
    text = render_tpu_precision_variants(KEPT)
    assert f"trainer files of `{KEPT['trainer_commit']}`" in text
    assert KEPT["trainer_commit"] != GRPO["trainer_commit"]
    for variant in KEPT["variants"]:
        base = next(s for s in KEPT["shapes"] if parse_label(s["shape"])[:2] == parse_label(variant["shape"])[:2])
        assert f"{variant['shape']} (" in text and f"step {variant['steady']['step_s']} s against {base['steady']['step_s']} s" in text
