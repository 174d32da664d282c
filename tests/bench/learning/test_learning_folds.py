"""The pre-registered learning bench's folds, scoring and decision rule (bench/learning/arith_folds.py,
bench/learning/learning_folds.py, bench/learning/learning_folds_stats.py)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.learning import learning_folds, learning_folds_stats
from bench.learning.arith_difficulty import load_rewards
from bench.learning.arith_folds import FOLDS, control_reward_text, fact_key, fold_rows
from bench.learning.learning_folds import PREREGISTRATION, score

REPO = Path(__file__).resolve().parents[3]


def _fact(question: str) -> str:
    a, op, b = question.removeprefix("What is ").removesuffix("?").split()
    return fact_key(int(a), op, int(b))


def test_every_question_is_in_one_fold_and_a_fact_never_crosses_folds():
    folds = fold_rows()
    questions = [r["question"] for f in FOLDS for r in folds[f]]
    assert len(questions) == len(set(questions)) == 300
    facts = {f: {_fact(r["question"]) for r in folds[f]} for f in FOLDS}
    assert not facts["A"] & facts["B"]
    fold_of = {r["question"]: f for f in FOLDS for r in folds[f]}
    assert all(fold_of[f"What is {a} {op} {b}?"] == fold_of[f"What is {b} {op} {a}?"] for a in range(10) for b in range(10) for op in "+-*")
    for op in "+-*":
        sizes = [sum(r["question"].split()[3] == op for r in folds[f]) for f in FOLDS]
        assert abs(sizes[0] - sizes[1]) <= 2, (op, sizes)


def test_the_folds_do_not_depend_on_the_run():
    assert fold_rows() == fold_rows()
    assert fold_rows(1) != fold_rows()


def test_control_reward_rate_is_set_and_the_file_still_runs(tmp_path):
    text = control_reward_text(0.375)
    assert "RATE = 0.375" in text
    namespace: dict = {}
    exec(compile(text, "arith_random_control.py", "exec"), namespace)
    draws = [namespace["random_reward"]("p", str(i)) for i in range(4000)]
    assert 0.34 < sum(draws) / len(draws) < 0.41


def test_three_scorings():
    rewards, answer = load_rewards(), json.dumps(["56", "56"])
    assert score("The answer is 56.", answer, rewards) == {"strict": 1, "lenient": 1, "format": 1}
    assert score("7 * 8 = 56", answer, rewards) == {"strict": 0, "lenient": 1, "format": 0}
    assert score("The answer is 54, not 56", answer, rewards) == {"strict": 0, "lenient": 1, "format": 1}
    assert score("", answer, rewards) == {"strict": 0, "lenient": 0, "format": 0}


def _rows(outcomes: list[int], ids: int = 40) -> list[dict]:
    return [
        {
            "id": str(i),
            "greedy": outcomes[i % len(outcomes)],
            "samples": [outcomes[i % len(outcomes)]] * 4,
            "lenient": {"greedy": 1, "samples": [1] * 4},
            "format": {"greedy": 0, "samples": [0] * 4},
        }
        for i in range(ids)
    ]


def test_decision_rule_reads_the_right_differences():
    models = {
        "base": {"rows": _rows([0, 0, 0, 1])},
        "trained": {"rows": _rows([1, 1, 0, 1])},
        "control": {"rows": _rows([0, 0, 0, 1])},
        "peer_trl": {"rows": _rows([1, 1, 0, 1])},
    }
    decision = learning_folds_stats.summarize(models)["decision"]
    assert {k: v["met"] for k, v in decision.items()} == {"trained_vs_base": True, "trained_vs_control": True, "trained_vs_peer": True}
    models["trained"] = models["control"]
    decision = learning_folds_stats.summarize(models)["decision"]
    assert {k: v["met"] for k, v in decision.items()} == {"trained_vs_base": False, "trained_vs_control": False, "trained_vs_peer": False}


def test_the_committed_preregistration_states_the_rule_the_code_applies():
    pre = json.loads(PREREGISTRATION.read_text())
    assert pre["decision_rule"] == learning_folds_stats.DECISION_RULE


def test_the_rendered_passage_says_what_its_intervals_leave_out_and_each_arms_final_kl():
    from bench.readme_render.learning_folds_section import render_learning_folds

    def run(kls):
        return {"phase": "SUCCEEDED", "train": [{"step": i + 1, "reward_mean": 0.5, "kl": kl} for i, kl in enumerate(kls)]}

    results = {
        "arms": {
            "trained": {"folds": {"A": run([9.0, 0.1, 0.1, 0.1, 0.1, 0.1]), "B": run([0.3] * 5)}},
            "peer_trl": {"folds": {"A": run([None] * 5), "B": run([None, 0.4])}},
        }
    }
    text = render_learning_folds(results)
    assert "one training run per fold" in text
    # the last 5 steps of each fold only: the 9.0 of fold A's first step is left out
    assert "`trained` 0.200" in text and "`peer_trl` 0.400" in text


def test_the_registered_fold_files_can_still_be_written(tmp_path):
    """The folds, seeds and shared-stream benches rebuild fold A and B's files and refuse them unless their hashes are
    the registered ones; the control reward's file is examples/rewards/arith_random_control.py with RATE set, so an
    edit of that file, a comment included, made every registered bench refuse to run (a path in its docstring
    followed the benches' regroup; the line is back as registered)."""
    from bench.learning.arith_folds import write_folds

    pre = json.loads(learning_folds.PREREGISTRATION.read_text())
    written = write_folds(tmp_path, pre["base"]["sampled_strict_rate"])
    assert {f: w["train_hash"] for f, w in written.items()} == pre["fold_hashes"]
    assert {w["control_reward_sha256"] for w in written.values()} == {pre["control_reward_sha256"]}
