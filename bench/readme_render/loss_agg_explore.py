"""bench/learning/README.md's passage on the exploratory loss_agg_mode run (bench/learning/loss_agg_explore.py), from
bench/results/loss_agg_explore.json. The verdict is recomputed from the recorded difference, so a result file
whose stored verdict disagrees with its own figures cannot render as if it agreed."""

from __future__ import annotations

from typing import Any

from bench.learning.loss_agg_explore import CANDIDATE, DEFAULT, EVAL_FOLD, MODES, TRAIN_FOLD, decide
from bench.readme_render.common import duration, where


def _pct(d: dict[str, Any]) -> str:
    return f"{d['mean'] * 100:.1f}% [{d['low'] * 100:.1f}, {d['high'] * 100:.1f}]"


def _pts(d: dict[str, Any]) -> str:
    return f"{d['difference'] * 100:+.1f} points [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}]"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _last5_kl(arm: dict[str, Any]) -> str:
    kls = [s["values"].get("kl") for s in (arm.get("train_steps_merged") or arm.get("train_steps", []))[-5:]]
    kept = [k for k in kls if k is not None]
    return f"; mean KL to the reference over the last 5 steps {sum(kept) / len(kept):.3f}" if kept else ""


def _arm_line(mode: str, arm: dict[str, Any], accuracy: dict[str, Any]) -> str:
    t = arm["training"]
    seconds = arm.get("train_seconds")
    norm = (
        f"gradient norm (`{t['grad_norm_key']}`) mean {_num(t['grad_norm_mean'], '.3g')}, median {_num(t['grad_norm_median'], '.3g')}, "
        f"above the clipping threshold {t['clip_threshold']:g} (so clipped to it) in {t['clipped_steps']} of {t['steps']} steps"
        if t["grad_norm_key"]
        else "no gradient norm among the job's metrics"
    )
    if t.get("source"):
        norm += " (the actor's figures from the job's TensorBoard files)"
    strict = accuracy["strict"][mode]
    return (
        f"- `{mode}`{' (the default)' if mode == DEFAULT else ''}: job `{arm['job_id']}`, {arm['phase']}, {t['steps']} steps"
        f"{f' in {duration(seconds)}' if seconds else ''}; mean reward {_num(t['reward_first5'], '.2f')} over the first 5 steps "
        f"and {_num(t['reward_last5'], '.2f')} over the last 5{_last5_kl(arm)}; {norm}. On fold {EVAL_FOLD}: sampled strict "
        f"{_pct(strict['sampled'])}, greedy strict {_pct(strict['greedy'])}."
    )


def verdict(summary: dict[str, Any]) -> str:
    supported = decide(summary["difference"]["sampled"])
    if supported == "cannot tell":
        return (
            f"The interval of {CANDIDATE} - {DEFAULT} (sampled strict) includes 0: this run cannot tell the two modes apart "
            "on held-out accuracy."
        )
    other = DEFAULT if supported == CANDIDATE else CANDIDATE
    return f"The interval of {CANDIDATE} - {DEFAULT} (sampled strict) excludes 0: the data support `{supported}` over `{other}`."


def render_loss_agg_explore(result: dict[str, Any]) -> str:
    summary, arms = result["summary"], result["arms"]
    diff = summary["difference"]
    ratio = summary.get("grad_norm_ratio")
    lines = [
        f"Exploratory, one seed each ({where(result.get('machine'))}): the trained/{TRAIN_FOLD} job "
        f"({result['steps']} steps, the pre-registered spec but for `grpo.loss_agg_mode`), both at once, each evaluated "
        f"on fold {EVAL_FOLD}'s suite ({diff['sampled']['n']} rows) by eval jobs; `bench/results/loss_agg_explore.json`.",
        "",
        *(_arm_line(mode, arms[mode], summary["accuracy"]) for mode in MODES),
        "",
        f"{CANDIDATE} - {DEFAULT}: sampled strict {_pts(diff['sampled'])}, greedy strict {_pts(diff['greedy'])} "
        f"(McNemar p={diff['mcnemar_greedy']['p']:.3g}); gradient norm ratio "
        f"{_num(ratio, '.2f') + 'x' if ratio is not None else 'not available (no gradient norm logged)'} "
        f"({CANDIDATE} over {DEFAULT}, mean over steps). {verdict(summary)}",
    ]
    return "\n".join(lines)
