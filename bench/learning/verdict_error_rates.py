"""How often the reward-trend verdict errs: simulated runs judged by the real `assess_learning`.

Before any evaluation, `improving` rests on a one-sided Cochran-Armitage trend test of the rewarded
rate over the steps a job keeps: its first FIRST_STEPS_KEPT and the window of its last HEALTH_WINDOW_STEPS
(service/domain/learning_health.py, reward_trend.py, train_step_summary.push_step). The test's level
holds per look, but a job is re-judged after every step, so the chance that a run whose rate never changes
reads `improving` at SOME step is larger. This bench measures, with fixed seeds and 16 completions per step:

- per-look false positives: constant rate, judged once, at step 20 (the first full window);
- per-run false positives: constant rate, re-judged after each of 50 and 100 steps (the rolling
  window), the fraction of runs that read `improving` at any step;
- power: a rate rising linearly over 30 steps, the fraction of runs that read `improving` by
  step 30 and the median first step at which they did;

each for trend_looks = 1 and the default (3), with its 95% Wilson interval. Both policies judge the
same simulated runs, and the 50-step figure is the first 50 steps of the 100-step runs. Every step
has signal (signal_fraction 0.5) and the job is SUCCEEDED, so neither `no-signal` nor `stalled`
can stand in the way.

    python bench/learning/verdict_error_rates.py                         # simulate, write the JSON, print the table
    python bench/learning/verdict_error_rates.py --render                # bench/learning/README.md's block, from the JSON alone
    python bench/learning/verdict_error_rates.py --check-readme bench/learning/README.md  # exit 1 unless it holds that block
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from service.domain.health.learning_health import HealthPolicy, assess_learning  # noqa: E402
from service.domain.records.health_models import Verdict  # noqa: E402
from service.domain.records.phases import JobPhase  # noqa: E402
from service.domain.records.train_step_summary import (  # noqa: E402
    FIRST_STEPS_KEPT,
    HEALTH_WINDOW_STEPS,
    TrainStepSummary,
    push_step,
)
from trainer.contract.run.evaluation import wilson_interval  # noqa: E402

RESULT_FILE = REPO / "bench" / "results" / "verdict_error_rates.json"
BEGIN, END = "<!-- verdict-rates:begin -->", "<!-- verdict-rates:end -->"
SEED = "verdict-error-rates"
RUNS = 2000  # per cell: a Wilson interval about +-1 point at 5%, +-0.4 at 1%
COMPLETIONS = 16
SIGNAL_FRACTION = 0.5
CONSTANT_RATES = (0.1, 0.3, 0.5)
RUN_STEPS = (50, 100)
LOOK_AT_STEP = 20
RISES = ((0.1, 0.5), (0.2, 0.35))  # the rewarded rate from step 1 to step RISE_STEPS, linearly
RISE_STEPS = 30
LOOKS = (1, HealthPolicy().trend_looks)
T0 = datetime(2030, 1, 1, tzinfo=UTC)
STEP_S = 10.0

# What the rendered paragraph claims; claim_failures() checks each against the JSON.
PER_RUN_FP_MAX = 0.10  # with the default looks, a constant-rate run reads improving within 50 steps: upper CI below
BIG_RISE_POWER_MIN = 0.90  # with the default looks, the big rise is found by step 30: lower CI above


def _summary(step: int, rewarded: int) -> TrainStepSummary:
    return TrainStepSummary(
        step=step,
        time=T0 + timedelta(seconds=STEP_S * step),
        signal_fraction=SIGNAL_FRACTION,
        loss=0.5,
        kl=0.01,
        completions=COMPLETIONS,
        rewarded_completions=rewarded,
    )


def _improving(kept: Sequence[TrainStepSummary], policy: HealthPolicy) -> bool:
    health = assess_learning(kept, phase=JobPhase.SUCCEEDED, stage=None, now=kept[-1].time, policy=policy)
    assert health is not None
    return health.verdict is Verdict.IMPROVING


def replay(
    rewarded: Sequence[int], policies: Sequence[HealthPolicy], judge_at: int | None = None
) -> tuple[list[int | None], list[bool | None]]:
    """Feed the steps one at a time, judging what the service keeps after each (the first steps and the rolling
    window, train_step_summary.push_step), as the service does.
    Per policy: the first step that read improving (None: none did), and the verdict at step
    `judge_at` (None when not asked). A policy stops being judged once it has read improving."""
    kept: list[TrainStepSummary] = []
    first: list[int | None] = [None] * len(policies)
    at: list[bool | None] = [None] * len(policies)
    for step, k in enumerate(rewarded, start=1):
        kept = push_step(kept, _summary(step, k))
        for i, policy in enumerate(policies):
            if first[i] is not None and step != judge_at:
                continue
            improving = _improving(kept, policy)
            if improving and first[i] is None:
                first[i] = step
            if step == judge_at:
                at[i] = improving
    return first, at


def _proportion(successes: int, runs: int) -> dict:
    low, high = wilson_interval(successes, runs)
    return {"runs": runs, "improving": successes, "proportion": successes / runs, "ci95": [low, high]}


def simulate(runs: int) -> dict:
    policies = [HealthPolicy(trend_looks=looks) for looks in LOOKS]
    per_run, per_look, power = [], [], []
    for rate in CONSTANT_RATES:
        rng = random.Random(f"{SEED}:constant:{rate}")
        firsts, ats = [], []
        for _ in range(runs):
            rewarded = [rng.binomialvariate(COMPLETIONS, rate) for _ in range(max(RUN_STEPS))]
            first, at = replay(rewarded, policies, judge_at=LOOK_AT_STEP)
            firsts.append(first)
            ats.append(at)
        for i, looks in enumerate(LOOKS):
            per_look.append({"rate": rate, "step": LOOK_AT_STEP, "looks": looks, **_proportion(sum(1 for a in ats if a[i]), runs)})
            for steps in RUN_STEPS:
                hits = sum(1 for f in firsts if f[i] is not None and f[i] <= steps)
                per_run.append({"rate": rate, "steps": steps, "looks": looks, **_proportion(hits, runs)})
    for start, end in RISES:
        rng = random.Random(f"{SEED}:rise:{start}:{end}")
        rates = [start + (end - start) * (s - 1) / (RISE_STEPS - 1) for s in range(1, RISE_STEPS + 1)]
        firsts = [replay([rng.binomialvariate(COMPLETIONS, r) for r in rates], policies)[0] for _ in range(runs)]
        for i, looks in enumerate(LOOKS):
            found = [f[i] for f in firsts if f[i] is not None]
            power.append(
                {
                    "from": start,
                    "to": end,
                    "steps": RISE_STEPS,
                    "looks": looks,
                    **_proportion(len(found), runs),
                    "median_first_step": statistics.median(found) if found else None,
                }
            )
    policy = HealthPolicy()
    return {
        "bench": "verdict_error_rates",
        "what": "runs simulated through service.domain.learning_health.assess_learning, re-judged after each step",
        "settings": {
            "runs_per_cell": runs,
            "seed": SEED,
            "completions_per_step": COMPLETIONS,
            "signal_fraction": SIGNAL_FRACTION,
            "window_steps": HEALTH_WINDOW_STEPS,
            "first_steps_kept": FIRST_STEPS_KEPT,
            "trend_p_max": policy.trend_p_max,
            "trend_min_steps": policy.trend_min_steps,
            "default_trend_looks": policy.trend_looks,
            "looks": list(LOOKS),
        },
        "false_positive_per_look": per_look,
        "false_positive_per_run": per_run,
        "power": power,
    }


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _cell(c: dict) -> str:
    low, high = c["ci95"]
    return f"{_pct(c['proportion'])} [{_pct(low)}, {_pct(high)}]"


def _pick(cells: Sequence[dict], **match: object) -> dict:
    (cell,) = [c for c in cells if all(c[k] == v for k, v in match.items())]
    return cell


def _span(cells: Sequence[dict]) -> str:
    low, high = min(c["proportion"] for c in cells), max(c["proportion"] for c in cells)
    return f"{_pct(low)}-{_pct(high)}"


def render(results: dict) -> str:
    """The README block (a paragraph and a table), from the JSON alone."""
    s = results["settings"]
    one, default = s["looks"]
    rates = sorted({c["rate"] for c in results["false_positive_per_look"]})
    steps = sorted({c["steps"] for c in results["false_positive_per_run"]})
    per_run, per_look, power = results["false_positive_per_run"], results["false_positive_per_look"], results["power"]
    fp = {(looks, n): [_pick(per_run, rate=r, steps=n, looks=looks) for r in rates] for looks in (one, default) for n in steps}
    rises = sorted({(c["from"], c["to"], c["steps"]) for c in power}, key=lambda r: r[1] - r[0], reverse=True)
    big, small = (_pick(power, looks=default, **dict(zip(("from", "to", "steps"), r, strict=True))) for r in (rises[0], rises[-1]))
    look_at = per_look[0]["step"]
    lines = [
        f"How often the reward-trend verdict errs (`bench/learning/verdict_error_rates.py`: {s['runs_per_cell']} simulated "
        f"runs per cell judged by `assess_learning`, {s['completions_per_step']} completions per step, the first "
        f"{s['first_steps_kept']} and the last {s['window_steps']} steps tested at one-sided p < {s['trend_p_max']:g}; "
        f"95% Wilson intervals). Judged once, "
        f"at step {look_at}, a run whose rewarded rate never changes reads `improving` in "
        f"{_span([_pick(per_look, rate=r, looks=one) for r in rates])} of runs with {one} look (the test's nominal level: "
        f"{s['trend_p_max']:.0%}). But the "
        f"verdict is re-judged after every step: with {one} look such a run passes through `improving` at some step "
        f"of {steps[0]} in {_span(fp[one, steps[0]])} of runs (of {steps[-1]}: {_span(fp[one, steps[-1]])}). "
        f"Requiring the test to pass at each of the last {default} looks (`HealthPolicy.trend_looks`, the default) "
        f"keeps that below {PER_RUN_FP_MAX:.0%} over {steps[0]} steps ({_span(fp[default, steps[0]])}; of "
        f"{steps[-1]}: {_span(fp[default, steps[-1]])}), while a rise from {big['from']:.0%} to {big['to']:.0%} "
        f"rewarded over {big['steps']} steps is still found by step {big['steps']} in {_pct(big['proportion'])} "
        f"of runs, and one from {small['from']:.0%} to {small['to']:.0%} in {_pct(small['proportion'])}.",
        "",
        f"| rewarded rate | reads `improving` | {one} look | {default} looks |",
        "|---|---|---|---|",
    ]
    for r in rates:
        row = [_pick(per_look, rate=r, looks=looks) for looks in (one, default)]
        lines.append(f"| constant {r:.0%} | at step {look_at} (judged once) | {_cell(row[0])} | {_cell(row[1])} |")
        for n in steps:
            row = [_pick(per_run, rate=r, steps=n, looks=looks) for looks in (one, default)]
            lines.append(f"| constant {r:.0%} | at any step of {n} | {_cell(row[0])} | {_cell(row[1])} |")
    for rise in rises:
        row = [_pick(power, looks=looks, **dict(zip(("from", "to", "steps"), rise, strict=True))) for looks in (one, default)]
        cells = [f"{_cell(c)}, median step {c['median_first_step']:g}" if c["median_first_step"] is not None else _cell(c) for c in row]
        lines.append(
            f"| {rise[0]:.0%} -> {rise[1]:.0%} over {rise[2]} steps | by step {rise[2]} (median first step "
            f"among those) | {cells[0]} | {cells[1]} |"
        )
    return "\n".join(lines) + "\n"


def claim_failures(results: dict) -> list[str]:
    """The rendered paragraph's claims that the JSON does not bear out (empty: all hold)."""
    s = results["settings"]
    one, default = s["looks"]
    shortest = min(c["steps"] for c in results["false_positive_per_run"])
    failures = []
    for c in results["false_positive_per_run"]:
        if c["looks"] == default and c["steps"] == shortest and not c["ci95"][1] < PER_RUN_FP_MAX:
            failures.append(
                f"{default} looks, constant {c['rate']:.0%} over {shortest} steps: {_cell(c)} is not below {PER_RUN_FP_MAX:.0%}"
            )
    big = max(results["power"], key=lambda c: c["to"] - c["from"])
    big_default = _pick(results["power"], looks=default, **{k: big[k] for k in ("from", "to", "steps")})
    if not big_default["ci95"][0] > BIG_RISE_POWER_MIN:
        failures.append(
            f"{default} looks find {big['from']:.0%} -> {big['to']:.0%} in {_cell(big_default)}, not above {BIG_RISE_POWER_MIN:.0%}"
        )
    # More looks can only delay `improving` (the last look is the one-look test), on the same runs.
    for kind in ("false_positive_per_run", "power"):
        for c in results[kind]:
            if c["looks"] != default:
                continue
            twin = _pick(results[kind], **{k: v for k, v in c.items() if k in ("rate", "steps", "from", "to")}, looks=one)
            if c["improving"] > twin["improving"]:
                failures.append(f"{kind}: {default} looks read improving more often than {one}: {c} vs {twin}")
    return failures


def readme_block(text: str) -> str | None:
    """What README.md holds between the markers; None without them."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="print the README block rendered from the JSON")
    parser.add_argument("--check-readme", type=Path, metavar="README", help="exit 1 unless it holds the rendering")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs per cell")
    parser.add_argument("--out", type=Path, default=RESULT_FILE)
    args = parser.parse_args(argv)
    if args.render or args.check_readme:
        expected = render(json.loads(args.out.read_text()))
        if args.render:
            print(f"{BEGIN}\n{expected}{END}")
        if args.check_readme:
            held = readme_block(args.check_readme.read_text())
            if held != expected:
                what = "has no" if held is None else "holds a stale"
                print(
                    f"{args.check_readme} {what} {BEGIN} ... {END} block: paste the output of "
                    f"`python bench/learning/verdict_error_rates.py --render` there",
                    file=sys.stderr,
                )
                return 1
        return 0
    started = time.perf_counter()
    results = simulate(args.runs)
    results["seconds"] = round(time.perf_counter() - started, 1)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(render(results))
    print(f"{results['seconds']} s; wrote {args.out}")
    for failure in claim_failures(results):
        print(f"CLAIM NOT BORNE OUT: {failure}", file=sys.stderr)
    return 1 if claim_failures(results) else 0


if __name__ == "__main__":
    sys.exit(main())
