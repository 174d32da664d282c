"""bench/learning/README.md's passages on the pre-registered multi-seed comparisons (bench/learning/learning_seeds.py),
from bench/results/learning_seeds.json and, redone on a shared data stream (issue 66 §4), learning_shared_stream.json.
The figures and the verdict are recomputed from the recorded rows with the registered rule
(bench/learning/learning_seeds_stats.py), never read from the file's stored summary, so a summary left stale by a later
run cannot render."""

from __future__ import annotations

import json
from typing import Any

from bench.learning import learning_seeds_stats as stats
from bench.readme_render.common import duration, load_span

ARM_NAMES = {"rljob": "rljob (fresh rollout keys, `kl_direction: policy_to_reference`)", "peer_trl": "TRL 1.16.0 GRPOTrainer"}


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _pts(x: float | None, sign: str = "+") -> str:
    return "-" if x is None else f"{x * 100:{sign}.1f}"


def _needed(counts: dict[str, int | None]) -> str:
    def n(v: int | None) -> str:
        return "over 1,000" if v is None else str(v)

    return f"{n(counts['half_width'])} seeds for a +-5-point half-width, {n(counts['matched_80'])} for an 80% chance of 'matched'"


def _run_line(seed: str, run: dict[str, Any], accuracy: dict[str, Any] | None) -> str:
    train = run["train"]
    seconds = train.get("train_seconds")
    ran = run.get("where", {}).get("accelerator", "cpu")
    state = f"{train['phase']}" + (f", trained in {duration(seconds)}" if seconds else "")
    load = load_span(run.get("machine"))
    figures = (
        f"sampled strict {_pct(accuracy['sampled'])}, greedy strict {_pct(accuracy['greedy'])} on {accuracy['rows']} rows"
        if accuracy
        else "not evaluated"
    )
    stream = train.get("stream")
    # What ran is the command's --no-shuffle: the runner's recorded TRL config (trl.config) is built by its registration
    # check with peer_trl's default, so its shuffle_dataset reads True for these runs too
    unshuffled = ", unshuffled (its command)" if "--no-shuffle" in (train.get("command") or []) else ""
    on_stream = f"{unshuffled}; its steps' prompts were the stream's in {stream['matching']} of {stream['steps']} steps" if stream else ""
    return f"  - seed {seed}: {_what_ran(train)} on {ran} ({load}), {state}{on_stream}; {figures}"


def _what_ran(train: dict[str, Any]) -> str:
    return f"job `{train['job_id']}`" if "job_id" in train else "bench/learning/peer_trl.py"  # TRL runs in-process: no job


def _reruns(results: dict[str, Any]) -> list[str]:
    lines = []
    for rerun in results.get("reruns", []):
        replaced = rerun.get("replaced") or {}
        seed = f" seed {rerun['seed']}" if "seed" in rerun else ""
        what = _what_ran(replaced.get("train") or {})
        lines.append(f"- Rerun under the registered policy: {rerun['arm']}{seed} ({what} replaced): {rerun['reason']}")
    return lines


def render_learning_seeds(results: dict[str, Any]) -> str:
    return _render(results, "learning_seeds")


def render_learning_shared_stream(results: dict[str, Any], seeds_bench: dict[str, Any] | None = None) -> str:
    """`seeds_bench`: learning_seeds.json, whose rljob runs of the same seeds trained on the same stream (rljob's side
    is unchanged by sharing it): each is shown beside, which says whether an rljob run repeats across days and commits."""
    earlier = {int(seed): run for seed, run in ((seeds_bench or {}).get("runs", {}).get("rljob", {})).items() if run.get("rows")}
    return _render(results, "learning_shared_stream", earlier)


def _beside(run: dict[str, Any], before: dict[str, Any]) -> str:
    """An rljob run against the seeds bench's run of the same seed: its accuracy, and on how many rows every
    completion was the same text."""
    mine = {r["id"]: r["completions"] for r in run.get("rows") or []}
    same = sum(mine.get(r["id"]) == r["completions"] for r in before["rows"])
    accuracy = stats.run_accuracy(before["rows"])
    return (
        f" (the seeds bench's run of this seed: sampled strict {_pct(accuracy['sampled'])}; every completion the same on "
        f"{same} of {len(before['rows'])} rows)"
    )


def _render(results: dict[str, Any], registration: str, earlier: dict[int, dict[str, Any]] | None = None) -> str:
    pre = json.loads(stats.PREREGISTRATION.with_name(f"{registration}.json").read_text())
    shared = pre.get("data_stream") == "shared"
    summary = stats.summarize(results, pre["seeds"])
    decision = summary["decision"]
    runs = results.get("runs", {})
    recorded = [r for arm in runs.values() for r in arm.values()]
    states = [r["code"] for r in recorded] + [r["evaluation_code"] for r in recorded if "evaluation_code" in r]
    states += [results["base"]["code"]] if "base" in results else []
    commits = sorted({s["commit"][:10] for s in states})
    registered = states[0]["registered_commit"][:10] if states else "-"
    dirty = any(s["uncommitted"] for s in states)
    differ = sorted({p for p in states[0]["objects"] if len({s["objects"].get(p) for s in states}) > 1}) if states else []
    lines = [
        f"Pre-registered in bench/preregistration/{registration}.json (commit `{registered}`, before any run); runs at "
        f"commit(s) {', '.join(f'`{c}`' for c in commits)}"
        + (" with uncommitted changes" if dirty else ", none with uncommitted changes")
        + (f"; the runs' code differs under {', '.join(differ)}" if differ else "; every run's code under the registered paths is the same")
        + ". Train on fold A, evaluate on fold B's 149 rows through eval jobs (8 samples and greedy per row, a fixed "
        "evaluation seed); the primary figure is sampled strict accuracy. "
        + (f"Seeds {pre['seeds'][0]}-{pre['seeds'][-1]}; TRL trains on each seed's rljob stream, unshuffled. " if shared else "")
        + f"`bench/results/{pre.get('result', 'learning_seeds.json')}`.",
        "",
    ]
    if summary["base"]:
        base = summary["base"]
        lines.append(f"- base (untrained): sampled strict {_pct(base['sampled'])}, greedy strict {_pct(base['greedy'])}")
    for arm in stats.ARMS:
        arm_runs = runs.get(arm, {})
        if not arm_runs:
            lines.append(f"- {ARM_NAMES[arm]}: not run yet")
            continue
        lines.append(f"- {ARM_NAMES[arm]}:")
        by_seed = summary["runs"].get(arm, {})
        for seed in sorted(arm_runs, key=int):
            line = _run_line(seed, arm_runs[seed], by_seed.get(int(seed)))
            before = (earlier or {}).get(int(seed)) if arm == "rljob" else None
            if before and arm_runs[seed].get("rows"):
                line += _beside(arm_runs[seed], before)
            lines.append(line)
        spread = decision["spread"].get(arm)
        if spread and spread["n"] >= 2:
            lines.append(
                f"  - over {spread['n']} seeds: mean {_pct(spread['mean'])}, sd {_pts(spread['sd'], '')} points; at that "
                f"spread a comparison needs {_needed(spread['seeds_needed'])}"
            )
    lines += _reruns(results)
    lines.append("")
    if "difference" in decision:
        d = decision["difference"]
        lines.append(
            f"rljob - TRL, paired by seed: {_pts(d['mean'])} points, 90% t-interval [{_pts(d['low'])}, {_pts(d['high'])}], "
            f"sd {_pts(d['sd'], '')}; {_needed(d['seeds_needed'])}."
        )
        if shared:
            u = decision["unpaired"]
            lines.append(f"Read unpaired (Welch): {_pts(u['mean'])} points, 90% interval [{_pts(u['low'])}, {_pts(u['high'])}].")
    if decision["verdict"] == stats.INCOMPLETE:
        missing = "; ".join(f"{arm} seed(s) {', '.join(map(str, seeds))}" for arm, seeds in decision["missing"].items())
        lines.append(f"Verdict: incomplete (no evaluated run yet for {missing}); no comparison is read from a partial set.")
    else:
        excludes = " (the interval excludes 0, inside the margin)" if decision.get("interval_excludes_zero") else ""
        lines.append(f"Verdict under the registered rule: **{decision['verdict']}**{excludes}.")
        if shared and decision["verdict"] == stats.CANNOT_TELL:
            counts = decision["difference"]["seeds_needed"]
            lines.append(f"Not powered at {len(pre['seeds'])} seeds: the measured spread asks for {_needed(counts)}.")
    return "\n".join(lines)
