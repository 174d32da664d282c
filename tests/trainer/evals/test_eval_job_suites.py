"""Eval suites (trainer/evals/): what the built-ins hold, the content hash, user suites refused with a reason,
and prompts equal to train_rl's own (MaxText's utils_rl.process_data)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.learning.arith_folds import fold_hash
from trainer.contract.spec.eval_suite import MAX_SUITE_ROWS, EvalSampling, SuiteSpec
from trainer.evals.arith_questions import fold_rows
from trainer.evals.builtin_suites import builtin_suite, first_number_settled
from trainer.evals.prompts import acceptable_answers
from trainer.evals.reward_arith import arith_correct
from trainer.evals.reward_gsm8k import gsm8k_final_number
from trainer.evals.runner import load_suite
from trainer.sources import DataError

REPO = Path(__file__).resolve().parents[3]
LEARNING_FOLDS = REPO / "bench" / "results" / "learning_folds.json"


def _example_reward():
    spec = importlib.util.spec_from_file_location("example_arith_correct", REPO / "examples" / "rewards" / "arith_correct.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.arith_correct


def _user_suite(tmp_path: Path, rows: list[dict], *, name="mine", sampling=None, reward_text=None) -> SuiteSpec:
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rewards = tmp_path / "rewards.py"
    rewards.write_text(reward_text or (REPO / "examples" / "rewards" / "arith_correct.py").read_text())
    template = tmp_path / "template.json"
    shutil.copyfile(REPO / "examples" / "templates" / "arith-one-shot.json", template)
    return SuiteSpec(
        name=name,
        data=str(data),
        rewards_path=str(rewards),
        rewards=["arith_correct"],
        prompt_template=str(template),
        sampling=sampling or EvalSampling(),
    )


ROWS = [{"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}, {"question": "What is 4 * 4?", "answer": "16"}]


def test_arith_suites_hold_the_learning_benchs_folds():
    recorded = json.loads(LEARNING_FOLDS.read_text())["folds"]
    folds = fold_rows()
    for fold, suite_name in (("A", "arith-a"), ("B", "arith-b")):
        assert fold_hash(folds[fold]) == recorded[fold]["train_hash"]  # the bench's fold, unchanged by the move
        suite = builtin_suite(suite_name)
        assert [r.question for r in suite.rows] == [r["question"] for r in folds[fold]]
    whole = builtin_suite("arith")
    assert len(whole.rows) == 300 and len({r.id for r in whole.rows}) == 300
    assert whole.rows[0].answers == tuple(acceptable_answers(folds["A"][0]["answer"]))
    assert whole.template == json.loads((REPO / "examples" / "templates" / "arith-one-shot.json").read_text())
    assert whole.sampling == EvalSampling() and whole.answer == "first-number"


def test_the_builtin_arith_reward_scores_as_the_example_reward():
    example = _example_reward()
    completions = ["The answer is 85.", "85.5", "85.0 or 86", "84, 85", "-1,234", "1,234", "no number", "", "The answer is 85,86"]
    for gold in ("85", "-1234", "1234"):
        answers = [json.dumps([gold, gold])] * len(completions)
        assert arith_correct([""] * len(completions), completions, None, answer=answers) == example(
            [""] * len(completions), completions, None, answer=answers
        )


def test_the_gsm8k_suite_and_its_lm_eval_flexible_match():
    suite = builtin_suite("gsm8k")
    assert len(suite.rows) == 100 and suite.answer == "last-number" and suite.template["TEMPLATE"].startswith("<start_of_turn>user")
    assert all(len(r.answers) == 2 and r.answers[0] == r.answers[1] for r in suite.rows)
    gold = [json.dumps(["1,080", "1,080"])]
    scored = {
        c: gsm8k_final_number([""], [c], None, answer=gold)[0]
        for c in ("So she pays $1,080.", "1080 then 7", "It is 1080", "1080.00", "<answer>1080</answer>")
    }
    assert scored == {"So she pays $1,080.": 1.0, "1080 then 7": 0.0, "It is 1080": 1.0, "1080.00": 0.0, "<answer>1080</answer>": 1.0}


def test_first_number_settled_only_once_more_text_cannot_change_it():
    texts = ("The answer is", "The answer is 3", "The answer is 3.", "The answer is 3,", "The answer is 3. ", "3 and")
    assert [first_number_settled(t) for t in texts] == [False, False, False, False, True, True]


def test_the_content_hash_follows_content_not_location(tmp_path):
    base = load_suite(_user_suite(tmp_path / "a", ROWS), tmp_path)
    moved = load_suite(_user_suite(tmp_path / "b", ROWS, name="other-name"), tmp_path)
    assert moved.content_hash == base.content_hash  # same rows, reward bytes, template, sampling elsewhere
    changed_row = load_suite(_user_suite(tmp_path / "c", [ROWS[0], {**ROWS[1], "answer": "17"}]), tmp_path)
    assert changed_row.content_hash != base.content_hash
    resampled = load_suite(_user_suite(tmp_path / "d", ROWS, sampling=EvalSampling(samples=5)), tmp_path)
    assert resampled.content_hash != base.content_hash
    reward_edit = (REPO / "examples" / "rewards" / "arith_correct.py").read_text() + "\n# edited\n"
    assert load_suite(_user_suite(tmp_path / "e", ROWS, reward_text=reward_edit), tmp_path).content_hash != base.content_hash
    assert base.identity().rows == 2 and base.identity().reward_functions == ["arith_correct"]
    assert base.rows[0].answers == ("5", "5") and base.rows[1].answers == ("16", "16")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"question": "q"}\n', "needs a non-empty text `question` and `answer`"),
        ("not json\n", "line 1 is not JSON"),
        ('{"question": "q", "answer": "1"}\n{"question": "q", "answer": "2"}\n', "ask the same question"),
        ("", "holds no rows"),
    ],
)
def test_a_bad_rows_file_is_refused_with_the_reason(tmp_path, content, reason):
    spec = _user_suite(tmp_path, ROWS)
    Path(spec.data).write_text(content)
    with pytest.raises(DataError, match=reason):
        load_suite(spec, tmp_path)


def test_more_rows_than_a_suite_holds_are_refused(tmp_path):
    spec = _user_suite(tmp_path, ROWS)
    Path(spec.data).write_text('{"question": "q", "answer": "1"}\n' * (MAX_SUITE_ROWS + 1))
    with pytest.raises(DataError, match=f"at most {MAX_SUITE_ROWS}"):
        load_suite(spec, tmp_path)
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"question": ["q"], "solution": ["1"]}), parquet)
    with pytest.raises(DataError, match="lacks column"):
        load_suite(spec.model_copy(update={"data": str(parquet)}), tmp_path)


def test_a_reward_file_without_the_function_or_that_fails_to_import_is_refused(tmp_path):
    with pytest.raises(DataError, match="defines no function 'arith_correct'"):
        load_suite(_user_suite(tmp_path / "a", ROWS, reward_text="def other(**kw):\n    return []\n"), tmp_path)
    with pytest.raises(DataError, match="raised ZeroDivisionError"):
        load_suite(_user_suite(tmp_path / "b", ROWS, reward_text="1 / 0\n"), tmp_path)
