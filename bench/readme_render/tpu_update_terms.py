"""bench/chip/README.md's update-terms block: each profiled shape's GRPO update, term by term, from
bench/results/tpu_grpo.json through bench/chip/tpu_update_terms.py."""

from __future__ import annotations

from typing import Any

from bench.chip.tpu_update_terms import largest, update_terms

GOAL_MFU = 0.35


def _policies(result: dict[str, Any], offloaded: dict[str, Any]) -> str:
    """Each shape's update with its layers kept in HBM (this result) against the same shape offloading them."""
    before = {s["shape"]: s["steady"] for s in offloaded["shapes"] if s.get("steady")}
    pairs = [(s["shape"], before[s["shape"]], s["steady"]) for s in result["shapes"] if s.get("steady") and s["shape"] in before]
    rollouts = "; ".join(f"{name} {off['rollout_s']} and {kept['rollout_s']} s" for name, off, kept in pairs)
    return (
        f"Each layer's input and q/k/v kept in HBM (trainer files of commit `{result['trainer_commit']}`, the train "
        f"stage's choice for every shape here) against offloaded to host memory as rl.yml does (the same shapes and "
        f"train commands but for the four `=device` overrides, trainer files of commit `{offloaded['trainer_commit']}`, "
        "`bench/results/tpu_grpo_offloaded.json`), steady update seconds and 6N MFU: "
        + "; ".join(
            f"{name} {off['update_s']} -> {kept['update_s']} s ({off['update_s'] / kept['update_s']:.2f}x), "
            f"{off['update_mfu']:.1%} -> {kept['update_mfu']:.1%}"
            for name, off, kept in pairs
        )
        + ". The two were measured in different sessions on the chip, not side by side: the rollouts, which the "
        f"policy does not touch, took {rollouts} there. The one pair run in one session is the 360M shape's at commit "
        "`ce9e55b` (`bench/results/tpu_grpo_layers_in_hbm.json`)."
    )


def render_tpu_update_terms(result: dict[str, Any], offloaded: dict[str, Any]) -> str:
    shapes = [t for t in (update_terms(s) for s in result["shapes"]) if t]
    goal = largest(result)
    if not shapes or goal is None:
        return "No shape of bench/results/tpu_grpo.json was profiled."
    names = list(dict.fromkeys(name for t in shapes for name in t["terms_ms"]))

    def cell(t: dict[str, Any], name: str) -> str:
        return f"{t['terms_ms'][name]} ({t['shares'][name]:.1%})" if name in t["terms_ms"] else "outside"

    rows = [
        "| term | " + " | ".join(f"{t['shape']} ms (share)" for t in shapes) + " |",
        "|---|" + "---|" * len(shapes),
        *(f"| {name} | " + " | ".join(cell(t, name) for t in shapes) + " |" for name in names),
        "| the update's wall time (steady mean) | " + " | ".join(f"{t['wall_ms']}" for t in shapes) + " |",
        "| update MFU, 6N over the wall time | " + " | ".join(f"{t['mfu_6n']:.1%}" for t in shapes) + " |",
    ]
    if any(t["reference_forward_inside"] for t in shapes):
        rows.append(
            "| update MFU, 8N (the reference forward's 2N too) | "
            + " | ".join(f"{t['mfu_8n']:.1%}" if t["mfu_8n"] is not None else "-" for t in shapes)
            + " |"
        )
    if not all(t["reference_forward_inside"] for t in shapes):
        rows.append(
            "| forwards before the update (reference and agreement), in the step's logprobs part | "
            + " | ".join(f"{t['forwards_before_update_ms']}" if t["forwards_before_update_ms"] is not None else "-" for t in shapes)
            + " |"
        )
        rows.append(
            "| MFU, 10N (the two forwards' 2N each too) over the update's wall time and the forwards' device time | "
            + " | ".join(f"{t['mfu_10n_with_forwards']:.1%}" if t["mfu_10n_with_forwards"] is not None else "-" for t in shapes)
            + " |"
        )
    rows.append("| MFU by HLO FLOPs over the train step's device time | " + " | ".join(f"{t['mfu_hlo_device']:.1%}" for t in shapes) + " |")
    beyond = sorted(((ms, name) for name, ms in goal["terms_ms"].items() if not name.startswith("model FLOPs")), reverse=True)
    reached = goal["mfu_6n"] >= GOAL_MFU
    return "\n".join(
        [
            *rows,
            "",
            f"35% on the largest shape, {goal['shape']}: {'reached' if reached else 'not reached'}, {goal['mfu_6n']:.1%} by 6N"
            + (f" and {goal['mfu_8n']:.1%} by 8N" if goal["mfu_8n"] is not None else "")
            + f". What stands between its {goal['terms_ms']['model FLOPs (6N) at peak']} ms of model "
            f"FLOPs at peak and its {goal['wall_ms']} ms, largest first: "
            + ", ".join(f"{name} {ms} ms" for ms, name in beyond)
            + (
                ". "
                if reached
                else f". The offload waits removed and nothing else changed (arithmetic, not a run): 6N "
                f"{goal['mfu_6n_without_offload_waits']:.1%}, "
                + ("enough by itself. " if goal["mfu_6n_without_offload_waits"] >= GOAL_MFU else "short of 35% by itself. ")
            )
            + (
                "The host's share is what the device terms leave of the wall time: near zero, which is what says the "
                "reference forward runs inside the update's wall time."
                if goal["reference_forward_inside"]
                else "The host's share is what the device terms leave of the wall time: near zero without the reference "
                f"forward, which this run's agreement read waited for before the update began (its {goal['forwards_before_update_ms']} "
                "ms, with the agreement's own forward, count in the step's logprobs part); counted inside, they would leave "
                "the wall time short by that much."
            ),
            "",
            _policies(result, offloaded),
        ]
    )
