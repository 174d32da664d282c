"""README passage of bench/chip/tpu_correctness.py: the jax rollout engine against MaxText's forward on the chip, and the GRPO
step's stop-token and objective patches there."""

from __future__ import annotations

from typing import Any


def _yes(value: bool) -> str:
    return "true" if value else "false"


def _engine_row(entry: dict[str, Any]) -> str:
    v, greedy = entry["verdict"], entry["greedy"]
    first = greedy["first_disagreement"]
    tokens = (
        "equal"
        if greedy["tokens_equal"]
        else f"first differs at token {first['token']} (MaxText's top-2 margin {first['maxtext_top2_margin']:.3g})"
    )
    return (
        f"| {entry['shape']} | {entry['dtype']} | {v['max_abs_diff']:.3g} | {v['logit_scale']:.3g} | {v['tolerance']:.3g} | "
        f"{_yes(v['logits_within_tolerance'])} | {_yes(v['argmax_agree'])} | {tokens} | {_yes(v['greedy_agrees'])} |"
    )


def _printed(result: dict[str, Any]) -> str:
    rows = result.get("engine_printed") or []
    if not rows:
        return ""
    lines = "\n".join(
        f"| {r['shape']} | {r['dtype']} | {v['max_abs_diff']:.3g} | {v['logit_scale']:.3g} | {v['max_abs_diff'] / v['logit_scale']:.2%} | "
        f"{v['tolerance']:.3g} | {_yes(v['logits_within_tolerance'])} | {_yes(v['greedy_tokens_equal'])} | {_yes(v['greedy_agrees'])} |"
        for r in rows
        for v in (r["verdict"],)
    )
    return (
        "\n\nChecks whose run was stopped before it wrote its file (a call on the chip has ten minutes), as the run printed "
        "them; they count in the verdicts:\n\n"
        "| shape | dtype | max abs logit diff | logit scale | diff / scale | tolerance | within | greedy tokens equal | "
        "greedy agrees |\n|---|---|---|---|---|---|---|---|---|\n" + lines
    )


def _diagnosis(result: dict[str, Any]) -> str:
    """Where an fp32 row misses: the same check with the logits projection untied, and again at fp32 matmul precision."""
    missed = [e for e in result["engine"] if e["dtype"] == "float32" and not e["verdict"]["logits_within_tolerance"]]
    untied = result.get("untied_diagnosis") or []
    if not missed and not untied:
        return ""
    lines = []
    for entry in missed:
        rerun = entry.get("rollout_at_fp32_matmul_precision")
        if rerun:
            lines.append(
                f'- {entry["shape"]} {entry["dtype"]}, the same weights again under `jax.default_matmul_precision("float32")`: '
                f"max abs logit diff {rerun['max_abs_diff']:.3g} at logit scale {rerun['logit_scale']:.3g} "
                f"({rerun['max_abs_diff'] / rerun['logit_scale']:.2g} of it): larger, not smaller. Its size is a bf16 pass's "
                "on one side only, which we read as one side's compiled step not taking the context; not traced further."
            )
    for entry in untied:
        v = entry["verdict"]
        lines.append(
            f"- {entry['shape']} {entry['dtype']} with an untied output projection (its own random weights): max abs logit diff "
            f"{v['max_abs_diff']:.3g} at logit scale {v['logit_scale']:.3g} ({v['max_abs_diff'] / v['logit_scale']:.2g} of it; "
            f"within {v['tolerance']:.3g}: {_yes(v['logits_within_tolerance'])}); greedy tokens equal: {_yes(v['greedy_tokens_equal'])}"
            + (f" (measured at commit `{entry['commit']}`; the files it runs unchanged since)." if entry.get("commit") else ".")
        )
    return (
        "\n\nDiagnosis of the fp32 rows, not counted in the verdicts. MaxText's tied logits (`attend_on_embedding`) call "
        "`jnp.dot` without its `matmul_precision`, so on TPU that one dot multiplies fp32 in bf16 passes in MaxText and, "
        "following it, in the engine; every other dot runs at `matmul_precision`:\n\n" + "\n".join(lines)
    )


def render_tpu_correctness(result: dict[str, Any]) -> str:
    machine, verdicts = result["machine"], result["verdicts"]
    stop, objective = result["stop_token"], result["objective"]
    rows = "\n".join(_engine_row(entry) for entry in result["engine"])
    relative = ", ".join(f"{dtype} {tolerance:.3g}" for dtype, tolerance in result["tolerance_relative_to_logit_scale"].items())
    seen = stop.get("seen") or {}
    return (
        f"JAX device kind '{result['device_kind']}', JAX {result['jax']}, trainer files of commit `{result['trainer_commit']}` "
        f"(collected {machine['started_at']}; run {result['wall_s']:.0f} s, torch loaded: {_yes(result['torch_loaded'])}). "
        f"Tolerance: the largest |logit| (at least 1) times {relative}.\n\n"
        "| shape | dtype | max abs logit diff | logit scale | tolerance | within | argmax agrees | greedy tokens | greedy agrees |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        f"{rows}\n\n"
        f"- stop-token fix active: {_yes(verdicts['stop_token_fix_active'])} (the learner step's completion mask "
        f"{seen.get('completion_mask')}, prompt mask {seen.get('prompt_mask')}; empty and stopped fractions "
        f"{stop.get('empty_and_stopped_fraction', {}).get('seen')})\n"
        f"- objective patch active: {_yes(verdicts['objective_patch_active'])} (train_rl's GrpoConfig call resolved to "
        f"kl_loss_mode {objective.get('kl_loss_mode')}, epsilon_high {objective.get('epsilon_high')}; its own arguments kept: "
        f"{_yes(bool(objective.get('train_rl_arguments_kept')))})" + _printed(result) + _diagnosis(result)
    )
