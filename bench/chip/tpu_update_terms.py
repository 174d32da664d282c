"""Issue 67 §1's fallback, from bench/results/tpu_grpo.json: where a GRPO update's time goes on the chip, term by term,
against the time its model FLOPs would take at the chip's peak.

JAX dispatches asynchronously, so the reference model's forward (`jit(compute_per_token_logps)`, beta > 0) returns to the
host at once (the step's `logprobs` part is milliseconds) and its device time is spent while the update waits for its
inputs: the update's wall time holds it. So the update is counted two ways: 6N (the policy's forward and backward per
token, what the update MFU column says) and 8N (with the reference forward's 2N, the work that wall time holds).
Since the sampler-trainer agreement (issue 66 §2, trainer/maxtext_entry/logprob_agreement.py) the step reads the
trainer's log-probabilities on the host before the update: that read waits for every forward queued before it, the
reference's among them, so a run that logged its agreement starts its update with no forward pending. Its update is
counted by 6N alone, and the forwards' device time (the reference's and the agreement's, one jitted function) is
reported beside it, in the step's `logprobs` part; the two counted together are 10N (each forward's 2N) over the
update's wall time and the forwards' device time.

The update's wall time (the steady mean) is split into the profiled step's device time: the reference forward, the
matrix-unit fusions (the model FLOPs at peak, what rematerialisation adds, and what the fusions lose to peak), the
offload waits (`async-done`: each layer's input copied to and from host memory, rl.yml on TPU), the elementwise
fusions, the rest of the device's ops, and what is left of the wall time (host and dispatch). Pure arithmetic over the
committed result; no device needed.
"""

from __future__ import annotations

from typing import Any

from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS

PEAK_BF16_FLOPS = TPU_GENERATIONS["v5e"].peak_bf16_flops_per_chip
REFERENCE_FORWARD = "jit(compute_per_token_logps)"
TRAIN_STEP = "jit(_train_step)"


def reference_forward_inside(shape: dict[str, Any]) -> bool:
    """Whether the update's wall time holds the forwards queued before it: not when the run read its agreement."""
    return not shape.get("agreement")


def update_terms(shape: dict[str, Any]) -> dict[str, Any] | None:
    """ms per term of one shape's update, each term's share of the wall time, and the MFU both ways."""
    profile, steady = shape.get("profile"), shape.get("steady")
    if not profile or not steady:
        return None
    s = shape["settings"]
    tokens = s["batch_size"] * s["num_generations"] * s["max_target_length"]
    wall_ms = steady["update_s"] * 1000
    six_n = 6 * shape["parameters"] * tokens
    eight_n = 8 * shape["parameters"] * tokens
    kinds = profile["update_ms_by_kind"]
    matmul_ms = kinds.get("convolution fusion", 0.0)
    ideal_ms = six_n / PEAK_BF16_FLOPS * 1000
    remat_ms = max(profile["update_hlo_tflops"] * 1e12 - six_n, 0.0) / PEAK_BF16_FLOPS * 1000
    reference_ms = profile["device_ms"].get(REFERENCE_FORWARD, 0.0)
    named = {"convolution fusion", "async-done", "loop fusion"}
    terms = {
        "model FLOPs (6N) at peak": ideal_ms,
        "rematerialisation's extra FLOPs at peak": remat_ms,
        "matrix fusions below peak": matmul_ms - ideal_ms - remat_ms,
        "offload waits (async-done)": kinds.get("async-done", 0.0),
        "elementwise fusions": kinds.get("loop fusion", 0.0),
        "other device ops": sum(ms for kind, ms in kinds.items() if kind not in named),
    }
    inside = reference_forward_inside(shape)
    if inside:
        terms["reference model's forward"] = reference_ms
    terms["host and dispatch (the rest of the wall time)"] = wall_ms - sum(terms.values())
    return {
        "shape": shape["shape"],
        "parameters": shape["parameters"],
        "tokens": tokens,
        "wall_ms": round(wall_ms, 1),
        "train_step_device_ms": profile["device_ms"].get(TRAIN_STEP),
        "terms_ms": {name: round(ms, 1) for name, ms in terms.items()},
        "shares": {name: round(ms / wall_ms, 3) for name, ms in terms.items()},
        "mfu_6n": round(six_n / (wall_ms / 1000) / PEAK_BF16_FLOPS, 3),
        "reference_forward_inside": inside,
        "forwards_before_update_ms": None if inside else round(reference_ms, 1),
        "mfu_8n": round(eight_n / (wall_ms / 1000) / PEAK_BF16_FLOPS, 3) if inside else None,
        # outside, the same FLOPs accounting over both: the update's 6N and the two forwards' 2N each (reference and
        # agreement), over the update's wall time and the forwards' device time
        "mfu_10n_with_forwards": None
        if inside
        else round((10 * shape["parameters"] * tokens) / ((wall_ms + reference_ms) / 1000) / PEAK_BF16_FLOPS, 3),
        "mfu_hlo_device": profile["update_hlo_mfu"],
        "matmul_mfu": profile["update_matmul_mfu"],
        # what the update would be without its offload waits, the other terms unchanged: an arithmetic bound on
        # that one change, not a measurement (the variant that keeps the inputs in HBM is the measurement)
        "mfu_6n_without_offload_waits": round(six_n / ((wall_ms - terms["offload waits (async-done)"]) / 1000) / PEAK_BF16_FLOPS, 3),
    }


def largest(result: dict[str, Any]) -> dict[str, Any] | None:
    """The terms of the largest profiled shape (the goal's shape)."""
    profiled = [s for s in result["shapes"] if s.get("profile") and s.get("steady")]
    return update_terms(max(profiled, key=lambda s: s["parameters"])) if profiled else None
