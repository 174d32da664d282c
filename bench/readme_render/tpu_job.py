"""bench/chip/README.md's chip job block (bench/results/tpu_job.json, bench/chip/tpu_job.py): a whole job through the service on
the TPU chip, the runs of the pre-registered learning bench so far, its rule's verdicts and the cost per point."""

from __future__ import annotations

from typing import Any

from bench.chip.tpu_job_collect import TERMINAL
from bench.chip.tpu_job_stats import cost_per_point, cost_summary, decide
from bench.readme_render.common import duration

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


def _paired(comparison: dict[str, Any] | None) -> str:
    """The export's sampled accuracy minus the base's on the same rows, with the service's paired bootstrap interval."""
    found = next((d for d in (comparison or {}).get("scores", []) if d["score"] == "sampled"), None)
    if found is None:
        return "-"
    return f"{_points(found['difference'])} [{_points(found['ci95'][0])}, {_points(found['ci95'][1])}]"


def _error(text: str) -> str:
    """A failed call's reason: the CLI's `error: ...` (wrapped over lines), else a traceback's last line."""
    if "error: " in text:
        return " ".join(text[text.rindex("error: ") :].split())
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:240]


def _phases_at_end(call: dict[str, Any]) -> str:
    """Where each of the call's jobs and its eval jobs stood when the call ended (its record, not the run's latest)."""
    said = []
    for name, ended in call["ended"].items():
        evals = ", ".join(f"{label} eval {phase or 'not made'}" for label, phase in ended["evals"].items())
        said.append(f"{name} {ended['phase']}" + (f" ({evals})" if evals else " (no eval job yet)"))
    return "; ".join(said)


def _ended_here(result: dict[str, Any], index: int) -> list[str]:
    """The call's jobs that reached their end during it: not already ended (same job id) at an earlier call's end."""
    call = result["calls"][index]
    ended_before = {
        earlier["jobs"][name]
        for earlier in result["calls"][:index]
        for name, ended in earlier.get("ended", {}).items()
        if ended["phase"] in TERMINAL
    }
    return [name for name, ended in call["ended"].items() if ended["phase"] in TERMINAL and call["jobs"][name] not in ended_before]


def _run_told(name: str, run: dict[str, Any]) -> str:
    goodput = run.get("goodput") or {}
    stages = ", ".join(f"{stage} {duration(s)}" for stage, s in run["stage_s"].items())
    told = (
        f"`{name}` (`{run['job_id']}`) ended {run['phase']}: {stages}; {run['steps'][0]} of {run['steps'][1]} "
        f"steps; {goodput.get('productive_fraction', 0):.0%} of its {duration(goodput.get('wall_s', 0))} was rollout and "
        f"update; {_usage_text(run)}; health: {run['health']['verdict']}."
    )
    if run.get("export_checked"):
        told += (
            " Its export passed export.verify on the host (the check fails the job when the export does not load, give "
            "finite logits and generate; there the JAX engine, no torch being installed)."
        )
    return told


def _call_runs(result: dict[str, Any], call: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The call's own runs by name: a run since replaced by a rerun is found among the reruns by its job id."""
    every = [*result.get("runs", {}).values(), *result.get("reruns", [])]
    by_id = {run["job_id"]: run for run in every}
    return {name: by_id[job_id] for name, job_id in call["jobs"].items()}


def _usage_text(run: dict[str, Any]) -> str:
    hours, usd, price = run.get("chip_hours"), run.get("cost_usd"), run.get("price_usd_per_chip_hour")
    if hours is None:
        return "no usage read"
    if usd is None or price is None:
        return f"{hours:.4f} chip-hours, no price"
    return f"{hours:.4f} chip-hours, ${usd:.4f} at ${price:g} per chip-hour"


def _took(result: dict[str, Any], call: dict[str, Any], names: list[str]) -> str:
    """How the call's service came by its jobs: submitted, or left running by an earlier call (`run --continue`)."""
    if not call.get("continues"):
        return f"took {len(names)} job{'s' if len(names) > 1 else ''} from `rljob submit` ({', '.join(names)})"
    recorded = any(c["started"] == call["continues"] for c in result["calls"])
    return f"served the same state again and followed {', '.join(names)}, submitted by the call of {call['continues']}" + (
        "" if recorded else " (which left no record of its own)"
    )


def _call(result: dict[str, Any], index: int) -> str:
    """One device call: where it ran, what the service did with its jobs, and what the CLI answered."""
    call = result["calls"][index]
    runs = _call_runs(result, call)
    names = list(runs)
    if not names:
        return f"Device call {index + 1} ({call['started']}): no job was submitted ({len(call.get('failed') or [])} failed command(s))."
    versions = call.get("versions") or {}
    commit = f"`{(call.get('commit') or '?')[:10]}`" + (" with uncommitted changes" if call.get("uncommitted") else "")
    said = [c for c in call["cli"] if c["rljob"]]
    answered = ", ".join(f"`rljob {name}`" for name in sorted({c["argv"][0] for c in said if c["rc"] == 0}))
    ended_here = _ended_here(result, index)
    parts = [
        f"Device call {index + 1} ({call['started']}, commit {commit}, JAX {versions.get('jax', '?')}, MaxText "
        f"{versions.get('maxtext', '?')}, Tunix {versions.get('tunix', '?')}; {duration(call['wall_s'])} of the call): "
        f'the local launcher read "{call.get("host_tpu") or "nothing"}". `rljob serve --uds` (socket mode '
        f"{call['serve']['socket_mode']}; that machine has no TCP) {_took(result, call, names)}, to run them and their "
        f"eval jobs one at a time on the chip; at the call's end: {_phases_at_end(call)}.",
        *(_run_told(name, runs[name]) for name in ended_here),
    ]
    if not ended_here:
        parts.append("No job reached its end in this call.")
    base = result.get("base") or {}
    if base.get("scores") and base.get("call") == call["started"]:
        parts.append(
            f"The base model's eval job (the JAX engine on the chip, {base['n']} rows x {base['k']} samples, "
            f"{base['generate_s']:.0f} s generating): sampled {_score(base['scores'], 'sampled')}, pass@1 "
            f"{_score(base['scores'], 'pass@1')}."
        )
    check = call.get("export_check")
    if check:
        parts.append(
            f"The export, loaded again after the jobs: {check.get('architecture')}, {check.get('num_parameters', 0):,} "
            f"parameters, finite {check.get('finite')}, greedy continuation {check.get('generated')!r}."
        )
    compare = call.get("compare")
    if compare:
        diffs = {d["score"]: d for d in compare["comparison"]["scores"]}
        said_diffs = "; ".join(
            f"{SCORE_NAMES[name]} {_points(diffs[name]['difference'])} points [{_points(diffs[name]['ci95'][0])}, "
            f"{_points(diffs[name]['ci95'][1])}]"
            + (f", McNemar p {diffs[name]['mcnemar_p']:.3g}" if diffs[name]["mcnemar_p"] is not None else "")
            for name in SCORE_NAMES
            if name in diffs
        )
        parts.append(f"`rljob eval-compare` export - base ({compare['comparison']['n']} rows paired): {said_diffs}.")
    parts.append(f"Answered through the CLI over the socket: {answered}.")
    failures = {f"`{' '.join(failed['argv'][:2])[:48]}`: {_error(failed['stderr_tail'])}" for failed in call.get("failed") or []}
    parts.extend(f"Failed: {failure}." for failure in sorted(failures))
    return " ".join(parts)


def _reruns(result: dict[str, Any]) -> str:
    """Runs the rerun policy replaced: which, why, and that their numbers are not used."""
    said = [
        f"{run['arm']}/{run['seed']} (`{run['job_id']}`, {run['phase']}): {run.get('reason') or 'no reason recorded'}"
        for run in result.get("reruns", [])
    ]
    if not said:
        return ""
    return "Rerun once under the registration's rerun policy, their numbers unused: " + "; ".join(said) + "."


def render_tpu_job(result: dict[str, Any]) -> str:
    base = result.get("base") or {}
    rows = [
        "| run | job | phase | steps | train | export's sampled (95% CI) | pass@1 (95% CI) | sampled - base, rows paired "
        "(95% CI) | chip-hours | cost |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| base (untrained) | `{base.get('eval_id', '-')}` (eval) | {base.get('phase', '-')} | - | - | "
        f"{_score(base.get('scores'), 'sampled')} | {_score(base.get('scores'), 'pass@1')} | - | {base.get('chip_hours') or 0:.4f} | "
        f"${base.get('cost_usd') or 0:.4f} |",
    ]
    for repeat in result.get("base_repeats", []):
        rows.append(
            f"| base again ({repeat['call']}) | `{repeat['eval_id']}` (eval) | {repeat['phase']} | - | - | "
            f"{_score(repeat.get('scores'), 'sampled')} | {_score(repeat.get('scores'), 'pass@1')} | - | "
            f"{repeat.get('chip_hours') or 0:.4f} | ${repeat.get('cost_usd') or 0:.4f} |"
        )
    for name, run in sorted(result.get("runs", {}).items(), key=lambda kv: (kv[1]["seed"], kv[1]["arm"])):
        scores = (run.get("export_eval") or {}).get("scores")
        train = run["stage_s"].get("train")
        rows.append(
            f"| {name} | `{run['job_id']}` | {run['phase']} | {run['steps'][0]}/{run['steps'][1]} | "
            f"{duration(train) if train else '-'} | {_score(scores, 'sampled')} | {_score(scores, 'pass@1')} | "
            f"{_paired(run.get('vs_base'))} | {run.get('chip_hours') or 0:.4f} | ${run.get('cost_usd') or 0:.4f} |"
        )
    unpaired = sorted(name for name, run in result.get("runs", {}).items() if run.get("vs_base") is None)
    if unpaired:
        rows.append(
            f"\nRows paired against the base: not measured for {', '.join(unpaired)}: the service compares only its own "
            "eval jobs, and those runs' calls made no base eval (`run --base` does)."
        )
    decided = decide(result)
    costs = cost_per_point(result)
    overall = cost_summary(result)
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
        f"trained - control {_interval(decided.get('vs_control'))}; trained - base {_interval(decided.get('vs_base'))}; "
        f"control - base {_interval(decided.get('control_vs_base'))}. Cost per point over base (training job's chip time "
        f"at list price), per run: {cost_text}; over the runs: "
        + (
            f"{overall['chip_s_per_point']:.1f} chip-seconds and ${overall['usd_per_point']:.5f} per point."
            if overall["established"]
            else f"{overall['why']}."
        )
    )
    calls = [_call(result, i) for i in range(len(result.get("calls") or []))]
    return "\n\n".join(part for part in [*calls, "\n".join(rows), _reruns(result), summary] if part)
