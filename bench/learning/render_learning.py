"""Render bench/learning/README.md's learning-benchmark section and bench/results/learning.png from learning.json.

Every figure in the section comes from bench/results/learning.json: accuracies and differences are
recomputed from the per-row outcomes with bench/learning/learning_stats.py (fixed bootstrap seed), so the
section is a pure function of the file; tests/bench/learning/test_learning_readme.py checks that bench/learning/README.md
holds exactly this rendering.

    python bench/learning/render_learning.py          # rewrite bench/learning/README.md's section and the plot
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.learning import learning_stats  # noqa: E402

RESULTS = REPO / "bench" / "results"
RESULT_FILE = RESULTS / "learning.json"
PLOT = RESULTS / "learning.png"
README = REPO / "bench" / "learning" / "README.md"
BEGIN, END = "<!-- learning-bench:begin -->", "<!-- learning-bench:end -->"
MODELS = ("base", "trained", "control")
DIFFERENCES = ("trained-base", "control-base", "trained-control")
PLANNED_EVAL_ROWS = 300


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _pts(x: float) -> str:
    return f"{x * 100:+.1f}"


def _ci(d: dict, key: str = "difference") -> str:
    return f"{_pts(d[key])} [{_pts(d['low'])}, {_pts(d['high'])}]"


def _acc(d: dict) -> str:
    return f"{_pct(d['mean'])} [{_pct(d['low'])}, {_pct(d['high'])}]"


def _minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 60:.0f} min"


def _arm_line(name: str, arm: dict | None) -> tuple[str, str, str]:
    if arm is None:
        return "-", "-", "-"
    train = arm["train"]
    signal = sum(1 for p in train if (p.get("signal_fraction") or 0) > 0)
    steps = f"{len(train)} of {arm['spec']['grpo']['num_batches']} ({_minutes(arm.get('train_seconds'))})"
    return f"`{arm['job_id']}` ({arm['phase']})", steps, f"{signal} of {len(train)}"


def _measured(criterion: str, summary: dict) -> str:
    d = summary["differences"]
    if criterion == "trained_vs_base":
        s = d["trained-base"]["sampled"]
        short = learning_stats.TARGET_GAIN - s["difference"]
        tail = "" if short <= 0 else f"; {short * 100:.1f} points short of +{learning_stats.TARGET_GAIN * 100:.0f}"
        return f"{_ci(s)} points{tail}"
    if criterion == "control_vs_base":
        return f"{_ci(d['control-base']['sampled'])} points"
    return f"{_ci(d['trained-control']['sampled'])} points"


def _verdict(criterion: str, verdict: dict, summary: dict) -> str:
    if not verdict["met"]:
        return "**missed**"
    if criterion == "trained_vs_control" and summary["differences"]["trained-control"]["sampled"]["high"] < 0:
        return "met as written (the CI excludes 0), **but below 0: trained is worse than control**"
    return "met"


def _conclusion(decision: dict, summary: dict) -> str:
    gain, control, versus = (decision[k]["met"] for k in ("trained_vs_base", "control_vs_base", "trained_vs_control"))
    d = summary["differences"]
    if d["trained-control"]["sampled"]["high"] < 0:
        worse = " and than base" if d["trained-base"]["sampled"]["high"] < 0 else ""
        return (
            f"the correctness reward left the model worse than the random-reward control{worse}: the opposite "
            "of learning (see what the policies wrote, below)."
        )
    if gain and control and versus:
        return "GRPO on the correctness reward taught this model the task beyond what GRPO's updates alone (the random-reward control) did."
    if gain and versus:
        return (
            "the trained model beat both, but the control also moved away from base by more than the band, so "
            "part of the change may come from GRPO's updates alone."
        )
    if versus:
        fell = d["control-base"]["sampled"]["high"] < 0
        return "the correctness reward did better than the control, but by less than the target set before the run (see the first row)" + (
            "; the control itself fell below base, so much of that gap is the control's loss, not a gain over base." if fell else "."
        )
    return "the run does not show learning from the correctness reward at the size set before the run."


def _samples_line(arms: dict) -> list[str]:
    """What each arm's policy wrote during training, from the completions the trainer kept per step."""
    parts = []
    for name, arm in arms.items():
        stats = arm.get("samples")
        if not stats:
            continue
        empty = [st["step"] for st in stats if st["empty_fraction"] == 1]
        tail = [st["step"] for st in reversed(stats)]
        run = 0
        while run < len(tail) and tail[run] in empty:
            run += 1
        since = f", every step from {tail[run - 1]} on" if run > 1 else ""
        parts.append(
            f"`{name}` had only empty completions at {len(empty)} of {len(stats)} steps{since} (mean length "
            f"{stats[0]['mean_chars']:.0f} characters at step {stats[0]['step']}, {stats[-1]['mean_chars']:.0f} "
            f"at step {stats[-1]['step']})"
        )
    if not parts:
        return []
    return ["", "  What the policies wrote during training (the completions each job kept, 8 per step): " + "; ".join(parts) + "."]


def _gsm8k_lines(gsm8k: dict | None) -> list[str]:
    """The no-regression row: greedy accuracy on GSM8K's real test rows, each model against base."""
    if not gsm8k:
        return []
    rows = {name: gsm8k["models"][name]["rows"] for name in MODELS if name in gsm8k["models"]}
    summary = learning_stats.summarize_greedy(rows)
    lines = [
        "",
        f"  No regression elsewhere? Greedy accuracy on the {gsm8k['rows']} real GSM8K test rows of `make-data "
        f"gsm8k` ({gsm8k['template']}, at most {_gsm8k_tokens(gsm8k)} new tokens, `#### N` line else last number):",
        "",
        "  | model | GSM8K greedy accuracy [95% CI] | minus base, points [95% CI] | McNemar vs base (right only "
        "in model / only in base, exact p) |",
        "  |---|---|---|---|",
    ]
    for name in rows:
        diff = summary["differences"].get(f"{name}-base")
        versus = "-" if diff is None else _ci(diff["greedy"])
        mc = diff and diff["mcnemar_greedy"]
        m = "-" if not mc else f"{mc['a_only']} / {mc['b_only']}, p = {mc['p']:.3g}"
        lines.append(f"  | `{name}` | {_acc(summary['accuracy'][name])} | {versus} | {m} |")
    return lines


def _gsm8k_tokens(gsm8k: dict) -> str:
    return ", ".join(sorted({str(m.get("new_tokens")) for m in gsm8k["models"].values()}))


def _spec_of(results: dict) -> dict:
    arms = results.get("arms", {})
    return (arms.get("trained") or arms.get("control") or {}).get("spec", {})


def _result_tables(results: dict) -> list[str]:
    """Accuracy per model, the three differences, the decision and what the policies wrote."""
    rows = {name: results["models"][name]["rows"] for name in MODELS if name in results.get("models", {})}
    summary = learning_stats.summarize(rows)
    arms = results.get("arms", {})
    lines = [
        "",
        "  | model | job | GRPO steps done (train stage) | steps with signal | sampled accuracy [95% CI] | greedy accuracy [95% CI] |",
        "  |---|---|---|---|---|---|",
    ]
    for name in MODELS:
        if name not in summary["accuracy"]:
            continue
        job, steps, signal = _arm_line(name, arms.get(name)) if name != "base" else ("-", "-", "-")
        acc = summary["accuracy"][name]
        lines.append(f"  | `{name}` | {job} | {steps} | {signal} | {_acc(acc['sampled'])} | {_acc(acc['greedy'])} |")
    lines += [
        "",
        "  | difference | sampled accuracy, points [95% CI] | greedy accuracy, points [95% CI] "
        "| greedy McNemar (right only in first / only in second, exact p) |",
        "  |---|---|---|---|",
    ]
    for pair in DIFFERENCES:
        if pair in summary["differences"]:
            d = summary["differences"][pair]
            m = d["mcnemar_greedy"]
            lines.append(
                f"  | {pair.replace('-', ' - ')} | {_ci(d['sampled'])} | {_ci(d['greedy'])} "
                f"| {m['a_only']} / {m['b_only']}, p = {m['p']:.3g} |"
            )
    decision = summary.get("decision")
    if decision:
        lines += [
            "",
            "  Decision rule, written into bench/learning/learning_stats.py before the first run, and the verdict:",
            "",
            "  | criterion | measured (sampled accuracy) | verdict |",
            "  |---|---|---|",
        ]
        for criterion, verdict in decision.items():
            lines.append(f"  | {verdict['rule']} | {_measured(criterion, summary)} | {_verdict(criterion, verdict, summary)} |")
        met = sum(v["met"] for v in decision.values())
        lines += ["", f"  {met} of {len(decision)} criteria met as written: {_conclusion(decision, summary)}"]
    return lines + _samples_line(arms)


def _followup_lines(name: str, results: dict, main: dict) -> list[str]:
    """A run chosen after seeing the main one: what differs from it, then its tables."""
    ours, theirs = _spec_of(results).get("grpo", {}), _spec_of(main).get("grpo", {})
    changed = [f"{k} {ours[k]} instead of {theirs.get(k)}" for k in sorted(ours) if ours[k] != theirs.get(k)]
    return [
        "",
        f"  **Follow-up run, chosen after seeing the run above** (so its verdict is exploratory, not the "
        f"pre-registered test), `bench/results/{name}`: the same bench with {', '.join(changed) or 'no change'}; "
        "everything else as above.",
    ] + _result_tables(results)


def render_section(results: dict, followups: dict[str, dict] | None = None) -> str:
    """The README section (between the markers) for the result file and any follow-up result files."""
    grpo = _spec_of(results).get("grpo", {})
    ev, data = results["eval"], results.get("data", {})
    lines = [
        "- `bench/learning/learning.py`: does GRPO through rljob teach a real small model? A controlled experiment on "
        "SmolLM2-135M-Instruct (**dequantised Q4_1**, see above) on integer arithmetic from `make-data arith` "
        f"({data.get('operands')} operands of {data.get('digits')} digit(s), operators `{data.get('operators')}`, "
        f"{data.get('train_rows')} train rows). Three models, same data, seed (MaxText's `data_shuffle_seed`), "
        "steps and learning rate: `base` "
        "(not trained), `trained` (GRPO with examples/rewards/arith_correct.py: 1.0 iff the first integer of the "
        "completion is the answer) and `control` (the same job with examples/rewards/arith_random_control.py: a "
        "0/1 reward at the base model's pass@1, independent of correctness). Each arm is a job submitted over "
        "REST to `rljob serve` and followed to its end; the jobs skip train_rl's own evaluation "
        "(`num_test_batches: 0`) because the bench evaluates every model itself on the same "
        f"{ev['rows']} held-out eval rows: one greedy completion and {ev['samples']} samples at the training "
        f"temperature ({grpo.get('temperature')}, top-k {grpo.get('top_k')}) from fixed seeds, with the prompt "
        "train_rl builds, scored by arith_correct. Sampled accuracy is the mean over the samples; intervals "
        "are paired bootstrap 95% CIs over prompts "
        f"({learning_stats.BOOTSTRAP_RESAMPLES} resamples, seed {learning_stats.BOOTSTRAP_SEED}). GRPO: "
        f"{grpo.get('num_batches')} steps of {grpo.get('batch_size')} prompt x {grpo.get('num_generations')} "
        f"completions, learning rate {grpo.get('learning_rate')}, beta {grpo.get('beta')}, on 2 CPU cores "
        "(`bench/results/learning.json`):",
    ]
    lines += _result_tables(results)
    lines += _gsm8k_lines(results.get("gsm8k"))
    for name, followup in (followups or {}).items():
        lines += _followup_lines(name, followup, results)
    lines += ["", "  ![first run: accuracy per model; reward and signal per step](../results/learning.png)", ""]
    new_tokens = {m.get("new_tokens") for m in results["models"].values()}
    lines.append(
        "  How it ran: both jobs ran at once on the same 2-core machine, shared with other work, so the train-stage "
        f"times above are wall times under that load. Steps: the example's {grpo.get('num_batches')} (one pass over "
        f"the {data.get('train_rows')} train rows), fixed before the run; they fit the 40-minute budget per arm at "
        "the step time of a 2-step trial with both jobs running. Nothing in the first run was tuned on eval rows; a "
        "follow-up's settings were chosen after seeing the first run, its eval included, and two 8-step learning-rate "
        "trials made while building the example read in-job evaluations of the first 8 eval rows: follow-ups are "
        "exploratory. "
        "A completion stops once its first number is settled "
        f"(arith_correct reads only that), at most {', '.join(str(n) for n in sorted(new_tokens, key=str))} new "
        "tokens, the jobs' own limit. "
        + ("" if results.get("gsm8k") else "Not measured: a GSM8K no-regression row (it did not fit this run's time). ")
        + "This bench's earlier GSM8K training runs are no longer reported."
    )
    if ev["rows"] < PLANNED_EVAL_ROWS and data.get("digits"):
        digits, operands = int(data["digits"]), int(data["operands"])
        space = (10 if digits == 1 else 9 * 10 ** (digits - 1)) ** operands
        lines += [
            "",
            (
                f"  The eval split has {ev['rows']} rows, not the {PLANNED_EVAL_ROWS} planned: at the difficulty "
                f"bench/learning/arith_difficulty.py chose ({operands} operands of {digits} digit(s), the base model's pass@1 in "
                f"[0.2, 0.6] where GRPO gets a signal) there are only {space} distinct questions, which make-data shares "
                f"out between train ({data['train_rows']}), dev ({data['dev_rows']}) and eval ({data['eval_rows']}) "
                "without repeating an operand pair; the intervals are wide accordingly."
            ),
        ]
    return "\n".join(lines)


def followup_files() -> dict[str, dict]:
    """bench/results/learning-*.json: runs chosen after seeing the main one, by file name."""
    found = {p.name: json.loads(p.read_text()) for p in sorted(RESULTS.glob("learning-*.json"))}
    return {name: results for name, results in found.items() if "summary" in results}  # finished runs only


def replace_section(readme: str, section: str) -> str:
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + "\n" + section + "\n" + readme[end:]


def readme_section(readme: str) -> str:
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[start:end].strip("\n")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {name: results["models"][name]["rows"] for name in MODELS if name in results.get("models", {})}
    accuracy = learning_stats.summarize(rows)["accuracy"]
    fig, (acc_ax, reward_ax, signal_ax) = plt.subplots(1, 3, figsize=(15, 4.2))
    for offset, kind in ((-0.15, "greedy"), (0.15, "sampled")):
        names = list(accuracy)
        means = [accuracy[n][kind]["mean"] for n in names]
        errors = [
            [m - accuracy[n][kind]["low"] for n, m in zip(names, means, strict=True)],
            [accuracy[n][kind]["high"] - m for n, m in zip(names, means, strict=True)],
        ]
        acc_ax.bar([i + offset for i in range(len(names))], means, width=0.3, yerr=errors, capsize=4, label=kind)
        acc_ax.set_xticks(range(len(names)), names)
    acc_ax.set(title=f"accuracy on {results['eval']['rows']} eval rows (95% CI)", ylabel="accuracy")
    for arm, result in results.get("arms", {}).items():
        steps = [p["step"] for p in result["train"]]
        reward_ax.plot(steps, [p.get("reward_mean") for p in result["train"]], marker=".", label=arm)
        signal_ax.plot(steps, [p.get("signal_fraction") for p in result["train"]], marker=".", label=arm)
    reward_ax.set(title="mean reward per GRPO step (each arm's own reward)", xlabel="step", ylabel="reward")
    signal_ax.set(title="prompts with non-zero advantage", xlabel="step", ylabel="signal fraction", ylim=(-0.05, 1.05))
    for ax in (acc_ax, reward_ax, signal_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("SmolLM2-135M-Instruct (dequantised Q4_1), GRPO on integer arithmetic through rljob, 2 CPU cores")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render_all(results: dict) -> None:
    plot(results, PLOT)
    README.write_text(replace_section(README.read_text(), render_section(results, followup_files())))


def main() -> int:
    render_all(json.loads(RESULT_FILE.read_text()))
    print(f"rendered {PLOT.relative_to(REPO)} and bench/learning/README.md's learning-benchmark section")
    return 0


if __name__ == "__main__":
    sys.exit(main())
