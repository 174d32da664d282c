"""bench/README.md's chip job block (bench/results/tpu_job.json, bench/tpu_job.py): a whole job through the service on
the TPU chip, the runs of the pre-registered learning bench so far, its rule's verdicts and the cost per point."""

from __future__ import annotations

from typing import Any

from bench.readme_render.common import duration
from bench.tpu_job_stats import cost_per_point, decide

SCORE_NAMES = {"sampled": "sampled", "pass@1": "pass@1 (greedy)"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _score(scores: dict[str, Any] | None, name: str) -> str:
    if not scores or name not in scores:
        return "-"
    low, high = scores[name]["ci95"]
    return f"{_pct(scores[name]['value'])} [{100 * low:.1f}, {100 * high:.1f}]"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def _interval(found: dict[str, Any] | None) -> str:
    if not found:
        return "no pair evaluated yet"
    if found["low"] is None:
        return f"{_points(found['mean'])} points (one seed: no interval): {found['verdict']}"
    interval = f"[{_points(found['low'])}, {_points(found['high'])}]"
    return f"{_points(found['mean'])} points, 95% t-interval {interval} over {found['n']} seeds: {found['verdict']}"


def _first_call(result: dict[str, Any]) -> str:
    call = result["calls"][0]
    first_name = next(iter(call["jobs"]))
    run = result["runs"][first_name]
    device = call.get("device") or {}
    versions = call.get("versions") or {}
    check = call.get("export_check") or {}
    stages = ", ".join(f"{stage} {duration(s)}" for stage, s in run["stage_s"].items())
    goodput = run.get("goodput") or {}
    said = [c for c in call["cli"] if not c["argv"][0].startswith("$REPO") and not c["argv"][0].startswith("/")]
    cli = ", ".join(f"`rljob {name}`" for name in sorted({c["argv"][0] for c in said if c["rc"] == 0}))
    failed = [" ".join(c["argv"][:2]) for c in said if c["rc"] != 0]
    commit = f"`{(call.get('commit') or '?')[:10]}`" + (" with uncommitted changes" if call.get("uncommitted") else "")
    lines = [
        f"On the chip's machine ({device.get('device_kind', '?')} x{device.get('devices', '?')}, TPU_ACCELERATOR_TYPE "
        f"{device.get('tpu_accelerator_type')}, JAX {versions.get('jax', '?')}, MaxText {versions.get('maxtext', '?')}, Tunix "
        f"{versions.get('tunix', '?')}; commit {commit}, "
        f"{call['started']}), `rljob serve --uds` (socket mode {call['serve']['socket_mode']}; the machine has no TCP) took "
        f"{len(call['jobs'])} job(s) from `rljob submit`; the first, `{first_name}` (`{run['job_id']}`), ended {run['phase']}: "
        f"{stages}; {run['steps'][0]} of {run['steps'][1]} steps; {goodput.get('productive_fraction', 0):.0%} of its "
        f"{duration(goodput.get('wall_s', 0))} productive (rollout + update); {run['chip_hours']:.4f} chip-hours, "
        f"${run['cost_usd']:.4f} at ${run['price_usd_per_chip_hour']:g} per chip-hour.",
        f"Its export, checked on the chip by the JAX engine: {check.get('architecture')}, {check.get('num_parameters', 0):,} "
        f"parameters, finite logits {check.get('finite')}, greedy continuation {check.get('generated')!r}.",
        f"Read back through the CLI over the socket: {cli} (exit 0){'; failed: ' + ', '.join(failed) if failed else ''}.",
    ]
    compare = call.get("compare")
    if compare:
        diffs = {d["score"]: d for d in compare["comparison"]["scores"]}
        said = "; ".join(
            f"{SCORE_NAMES[name]} {_points(diffs[name]['difference'])} points [{_points(diffs[name]['ci95'][0])}, "
            f"{_points(diffs[name]['ci95'][1])}]"
            + (f", McNemar p {diffs[name]['mcnemar_p']:.3g}" if diffs[name]["mcnemar_p"] is not None else "")
            for name in SCORE_NAMES
            if name in diffs
        )
        lines.append(
            f"`rljob eval-compare` export - base on {compare['suite']['name']} v{compare['suite']['version']} "
            f"({compare['comparison']['n']} rows paired, {compare['a'].get('engine')} engine): {said}."
        )
    return " ".join(lines)


def render_tpu_job(result: dict[str, Any]) -> str:
    base = result.get("base") or {}
    rows = [
        "| run | job | phase | steps | train | export's sampled (95% CI) | pass@1 (95% CI) | chip-hours | cost |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| base (untrained) | `{base.get('eval_id', '-')}` (eval) | {base.get('phase', '-')} | - | - | "
        f"{_score(base.get('scores'), 'sampled')} | {_score(base.get('scores'), 'pass@1')} | {base.get('chip_hours') or 0:.4f} | "
        f"${base.get('cost_usd') or 0:.4f} |",
    ]
    for name, run in sorted(result.get("runs", {}).items(), key=lambda kv: (kv[1]["seed"], kv[1]["arm"])):
        scores = (run.get("export_eval") or {}).get("scores")
        train = run["stage_s"].get("train")
        rows.append(
            f"| {name} | `{run['job_id']}` | {run['phase']} | {run['steps'][0]}/{run['steps'][1]} | "
            f"{duration(train) if train else '-'} | {_score(scores, 'sampled')} | {_score(scores, 'pass@1')} | "
            f"{run.get('chip_hours') or 0:.4f} | ${run.get('cost_usd') or 0:.4f} |"
        )
    decided = decide(result)
    costs = cost_per_point(result)
    cost_text = (
        "; ".join(
            f"{c['run']}: {c['points']:+.1f} points for {c['chip_s']:.0f} chip-seconds"
            + (
                f" ({c['chip_s_per_point']:.1f} chip-s and ${c['usd_per_point']:.5f} per point)"
                if c["chip_s_per_point"] is not None and c["usd_per_point"] is not None
                else " (no gain)"
            )
            for c in costs
        )
        or "no trained run evaluated yet"
    )
    done = ", ".join(f"{s}" for s in decided["evaluated_pairs"]) or "none"
    summary = (
        f"The registered rule (seeds {', '.join(map(str, decided['seeds']))}; pairs evaluated so far: {done}): "
        f"trained - control {_interval(decided.get('vs_control'))}; trained - base {_interval(decided.get('vs_base'))}. "
        f"Cost per point over base (training job's chip time at list price): {cost_text}."
    )
    return "\n".join([_first_call(result), "", *rows, "", summary])
