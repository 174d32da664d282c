"""`make-data arith` and its two reward files: splits, ids, MaxText's reading of the answers, the rewards."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from tests.trainer.conftest import REPO
from trainer.cli import main
from trainer.contract.run.evaluation import row_id
from trainer.contract.spec.file import load_spec_file
from trainer.offline import arith_rows
from trainer.offline.arith_rows import Difficulty, arith_split, arith_splits

DIFFICULTY_RESULT = REPO / "bench" / "results" / "arith_difficulty.json"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / "rewards" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _operands(question: str) -> tuple[int, ...]:
    return tuple(int(t) for t in question.removeprefix("What is ").removesuffix("?").split()[::2])


def _make(out, *extra: str) -> dict[str, list[dict]]:
    assert main(["make-data", "arith", "--out", str(out), *extra]) == 0
    return {split: _read(out / f"{split}.jsonl") for split in ("train", "dev", "eval")}


def test_default_splits_are_disjoint_in_operand_tuples_with_stable_ids(tmp_path, capsys):
    splits = _make(tmp_path / "a")
    assert {s: len(r) for s, r in splits.items()} == {
        "train": arith_rows.DEFAULT_TRAIN_ROWS,
        "dev": arith_rows.DEFAULT_DEV_ROWS,
        "eval": arith_rows.DEFAULT_EVAL_ROWS,
    }
    tuples = {s: [_operands(r["question"]) for r in rows] for s, rows in splits.items()}
    for name, found in tuples.items():
        assert len(set(found)) == len(found), f"a repeated operand tuple within {name}"
    assert not set(tuples["train"]) & set(tuples["dev"])
    assert not set(tuples["train"]) & set(tuples["eval"])
    assert not set(tuples["dev"]) & set(tuples["eval"])
    rows = [r for split in splits.values() for r in split]
    # The id is the eval recorder's row id, so data rows and train_rl's eval outcomes join on it.
    assert all(list(r) == ["id", "question", "answer"] and r["id"] == row_id(r["question"]) for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    import pyarrow.parquet as pq

    assert pq.read_table(str(tmp_path / "a" / "eval.parquet")).to_pylist() == splits["eval"]
    assert json.loads(capsys.readouterr().out)["eval_rows"] == str(arith_rows.DEFAULT_EVAL_ROWS)
    # The job's template and reward files come with the rows, as examples/ holds them.
    for name in arith_rows.JOB_FILES:
        assert (tmp_path / "a" / name.split("/")[1]).read_bytes() == (REPO / "examples" / name).read_bytes()


def test_rows_are_deterministic_per_seed_and_each_split_draws_with_its_own_seed(tmp_path):
    first, again = _make(tmp_path / "a", "--seed", "7"), _make(tmp_path / "b", "--seed", "7")
    assert first == again
    other = _make(tmp_path / "c", "--seed", "8")
    assert all(first[s] != other[s] for s in first)
    # Eval is drawn first: more training rows leave it as it was.
    assert _make(tmp_path / "d", "--seed", "7", "--train-rows", "20")["eval"] == first["eval"]
    same = {"count": 20, "seed": 7, "difficulty": Difficulty(), "taken": set()}
    assert arith_split(split="train", **same) != arith_split(split="eval", **dict(same, taken=set()))


def test_difficulty_knobs_shape_every_question_and_the_answers_are_right(tmp_path):
    splits = _make(
        tmp_path, "--digits", "3", "--operands", "3", "--operators=-*", "--train-rows", "300", "--dev-rows", "20", "--eval-rows", "30"
    )
    seen_operators = set()
    for row in (r for split in splits.values() for r in split):
        expression = row["question"].removeprefix("What is ").removesuffix("?")
        tokens = expression.split()
        numbers, operators = tokens[::2], tokens[1::2]
        assert len(numbers) == 3 and all(len(n) == 3 for n in numbers)
        assert set(operators) <= {"-", "*"}
        seen_operators |= set(operators)
        value = eval(expression)  # digits and operators only (checked above): an independent oracle
        assert row["answer"] == f"{expression} = {value}\n#### {value}"
    assert seen_operators == {"-", "*"}
    one_digit = arith_splits({"train": 60, "dev": 10, "eval": 30}, seed=1, difficulty=Difficulty(1, 2, "+"))
    assert all(0 <= n <= 9 for rows in one_digit.values() for r in rows for n in _operands(r["question"]))


def test_maxtext_reads_the_answer_line_as_the_reward_functions_expect():
    import multiprocessing.pool  # noqa: F401  (maxtext 0.2.5's utils_rl needs it imported first)

    from maxtext.trainers.post_train.rl import utils_rl

    class ChatTemplate:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "<user>" + messages[0]["content"]

    template = json.loads((REPO / "examples" / "templates" / "arith-one-shot.json").read_text())
    tags = SimpleNamespace(reasoning_start_token="<r>", reasoning_end_token="</r>", solution_start_token="<a>", solution_end_token="</a>")
    rows = arith_splits({"train": 3, "dev": 1, "eval": 1}, seed=3, difficulty=Difficulty(2, 2, "-"))["train"]
    rewards = _load("arith_correct")
    for row in rows:
        # train_rl's own pipeline step, with the dataset name rljob passes for GSM8K-format files.
        processed = utils_rl.process_data("openai/gsm8k", ChatTemplate(), template, tags, row)
        value = row["answer"].split("#### ")[1]
        assert json.loads(processed["answer"]) == [value, value]
        assert processed["prompts"].startswith("<user>") and row["question"] in processed["prompts"]
        assert rewards.arith_correct([processed["prompts"]], [value], tags, answer=[processed["answer"]]) == [1.0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--operators", "/"], "--operators must be one or more of + - *"),
        (["--operators", "++"], "--operators must be one or more of + - *"),
        (["--operators", ""], "--operators must be one or more of + - *"),
        (["--digits", "0"], "--digits must be between 1 and"),
        (["--operands", "1"], "--operands must be between 2 and"),
        (["--digits", "1", "--train-rows", "51"], "make only 100 distinct operand tuples, fewer than the 101 rows"),
        (["--eval-rows", "0"], "--eval-rows must be at least 1"),
        (["--train-rows", "0"], "--train-rows must be at least 1"),
    ],
)
def test_bad_knobs_are_refused_with_a_message_not_a_traceback(tmp_path, capsys, argv, message):
    assert main(["make-data", "arith", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("make-data: ") and message in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_missing_job_files_are_named_outside_a_checkout(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(arith_rows, "EXAMPLES", tmp_path / "examples")
    assert main(["make-data", "arith", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "templates/arith-one-shot.json, rewards/arith_correct.py" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_arith_knobs_are_refused_for_gsm8k(tmp_path, capsys):
    assert main(["make-data", "gsm8k", "--out", str(tmp_path), "--digits", "3", "--eval-rows", "5"]) == 2
    assert "--eval-rows, --digits applies only to arith" in capsys.readouterr().err


def test_defaults_are_the_difficulty_the_bench_chose(monkeypatch):
    choice = json.loads(DIFFICULTY_RESULT.read_text())["choice"]
    for name in ("RLJOB_SMOLLM2_DIR", "RLJOB_ARITH_DIR", "RLJOB_OUTPUT"):
        monkeypatch.setenv(name, f"/x/{name.lower()}")
    spec = load_spec_file(REPO / "examples" / "smollm2-arith-cpu.yaml")
    assert spec.grpo.temperature == choice["temperature"]
    assert spec.grpo.num_batches <= arith_rows.DEFAULT_TRAIN_ROWS  # train_rl stops when the rows run out
    assert spec.dataset.prompt_template == "/x/rljob_arith_dir/arith-one-shot.json"
    assert spec.grpo.rewards.functions_path == "/x/rljob_arith_dir/arith_correct.py"
    assert choice["setting"] == {
        "digits": arith_rows.DEFAULT_DIGITS,
        "operands": arith_rows.DEFAULT_OPERANDS,
        "operators": arith_rows.DEFAULT_OPERATORS,
    }


def test_correctness_reward_reads_the_first_number_only():
    rewards = _load("arith_correct")
    cases = [
        ("85", "85", 1.0),
        (" 85.\n47 + 38 = 85", "85", 1.0),
        ("The answer is 85, not 84.", "85", 1.0),
        ("47 + 38 = 85", "85", 0.0),  # restating the question first: 47 is the first number
        ("84, 85, 86", "85", 0.0),  # a list of guesses pays nothing
        ("-34", "-34", 1.0),
        ("It is -34", "34", 0.0),
        ("1,234 in all", "1234", 1.0),
        ("1,234", "1,234", 1.0),
        ("85.0", "85", 1.0),
        ("85.5", "85", 0.0),
        ("eighty-five", "85", 0.0),
        ("", "85", 0.0),
    ]
    completions = [c for c, _, _ in cases]
    # MaxText's batches hold the acceptable answers as a numpy array of JSON strings.
    answer = np.asarray([json.dumps([gold, gold]) for _, gold, _ in cases])
    assert rewards.arith_correct(["q"] * len(cases), completions, None, answer=answer) == [s for *_, s in cases]
    assert rewards.arith_correct(["q"], ["85"], None) == [0.0]


def test_control_reward_has_the_measured_rate_is_deterministic_and_blind_to_correctness():
    control, correct = _load("arith_random_control"), _load("arith_correct")
    result = json.loads(DIFFICULTY_RESULT.read_text())
    chosen = result["choice"]
    measured = [
        m
        for m in result["settings"]
        if m["temperature"] == chosen["temperature"] and {k: m[k] for k in chosen["setting"]} == chosen["setting"]
    ]
    assert [m["pass_at_1"] for m in measured] == [chosen["pass_at_1"]] == [control.RATE]
    rows = arith_splits({"train": 2000, "dev": 1, "eval": 1}, seed=5, difficulty=Difficulty(3, 2, "+"))["train"]
    prompts = [r["question"] for r in rows for _ in range(4)]
    golds = [r["answer"].split("#### ")[1] for r in rows for _ in range(4)]
    # Half the completions right, half wrong, in varied wording.
    completions = [f"{int(g) + (i % 2)} is it ({i % 4})" for i, g in enumerate(golds)]
    answer = np.asarray([json.dumps([g, g]) for g in golds])
    rewards = control.arith_random_control(prompts, completions, None, answer=answer)
    right = correct.arith_correct(prompts, completions, None, answer=answer)
    assert sum(right) == len(right) / 2
    on_right = [r for r, ok in zip(rewards, right, strict=True) if ok]
    on_wrong = [r for r, ok in zip(rewards, right, strict=True) if not ok]
    for subset in (rewards, on_right, on_wrong):  # 8,000 and 4,000 hashed draws: within 4.5 standard errors
        assert abs(sum(subset) / len(subset) - control.RATE) < 0.035
    assert set(rewards) == {0.0, 1.0}
    assert control.arith_random_control(prompts[::-1], completions[::-1], None) == rewards[::-1]
    draws = [control.random_reward(f"p{i}", "c", rate=0.3) for i in range(20000)]
    assert abs(sum(draws) / len(draws) - 0.3) < 0.015
