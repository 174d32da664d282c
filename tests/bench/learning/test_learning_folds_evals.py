"""The learning bench's evaluations as eval jobs (bench/learning/learning_folds_evals.py): the suites it builds sample as
pre-registered and load as an eval job loads them, each model's checkpoint is evaluated on the right fold, the
suite's reward functions score every completion the bench ever recorded as the bench's `score()` did, and the
service's comparison reads the same pass@1 difference and McNemar p as the bench's statistics."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from bench.learning import learning_folds_evals as evals
from bench.learning import learning_stats
from bench.learning.arith_difficulty import load_rewards
from bench.learning.arith_folds import FOLDS, fold_rows
from bench.learning.learning_folds import PREREGISTRATION, RESULT, score
from service.domain.evals.eval_jobs import EvalCreate
from service.domain.records.eval_models import EvalComparisonPublic, EvalSide, EvalSuitePublic
from trainer.contract.run.eval_report import RowOutcome, compare_outcomes
from trainer.contract.spec.eval_suite import EvalCheckpoint, EvalSampling, SuiteSpec
from trainer.evals.prompts import acceptable_answers
from trainer.evals.scoring import score_row
from trainer.evals.suite import load_user_suite

PRE = json.loads(PREREGISTRATION.read_text())
FUNCTIONS = ["arith_correct", "arith_lenient", "arith_format"]
ANSWERS = {r["id"]: r["answer"] for rows in fold_rows().values() for r in rows}


def test_each_folds_suite_samples_as_registered_and_loads_as_an_eval_job_loads_it(tmp_path):
    suites = evals.write_suites(tmp_path, PRE)
    # What the published in-process evaluation used: 8 samples at the jobs' 0.7 / top-k 50, 112 - 80 new tokens, its seed.
    registered = EvalSampling(samples=8, temperature=0.7, top_k=50, max_new_tokens=32, seed=20261204)
    hashes = {}
    for fold in FOLDS:
        spec = SuiteSpec.model_validate(suites[fold])
        assert spec.sampling == registered and not spec.builtin
        loaded = load_user_suite(spec, tmp_path)
        assert [row.question for row in loaded.rows] == [r["question"] for r in fold_rows()[fold]]
        assert [row.id for row in loaded.rows] == [r["id"] for r in fold_rows()[fold]]  # rows pair with the bench's by id
        assert all(row.answers == tuple(acceptable_answers(ANSWERS[row.id])) for row in loaded.rows)
        assert loaded.function_names == FUNCTIONS  # strict first: the primary the service compares on
        assert loaded.template == json.loads(evals.TEMPLATE.read_text())
        hashes[fold] = loaded.content_hash
    assert hashes["A"] != hashes["B"]
    again = evals.write_suites(tmp_path / "again", PRE)  # another run, another directory: the same suite versions
    assert {f: load_user_suite(SuiteSpec.model_validate(again[f]), tmp_path).content_hash for f in FOLDS} == hashes


def test_each_model_is_evaluated_on_the_fold_it_did_not_train_on(tmp_path):
    suites = evals.write_suites(tmp_path / "suites", PRE)
    runs = {
        "A": {"phase": "SUCCEEDED", "job_id": "rl-aaaaaaaaaaaa", "export": "/w/runs/rl-aaaaaaaaaaaa/hf"},
        "B": {"phase": "SUCCEEDED", "job_id": "rl-bbbbbbbbbbbb", "export": "/w/runs/rl-bbbbbbbbbbbb/hf"},
    }
    peer = {"A": {"phase": "SUCCEEDED", "export": "/w/peer_trl/A/export"}, "B": {"phase": "SUCCEEDED", "export": "/w/peer_trl/B/export"}}
    assert evals.checkpoints("base", model_dir=Path("/w/smollm2")) == {"A": "/w/smollm2", "B": "/w/smollm2"}
    assert evals.checkpoints("trained", arms=runs) == {"B": "rl-aaaaaaaaaaaa:export", "A": "rl-bbbbbbbbbbbb:export"}
    assert evals.checkpoints("peer_trl", arms=peer) == {"B": "/w/peer_trl/A/export", "A": "/w/peer_trl/B/export"}
    with pytest.raises(SystemExit, match="control/B.*FAILED"):
        evals.checkpoints("control", arms={**runs, "B": {"phase": "FAILED", "job_id": "rl-bbbbbbbbbbbb", "export": None}})
    requests = evals.eval_requests("trained", evals.checkpoints("trained", arms=runs), suites, tmp_path / "runs")
    for fold, body in requests.items():
        created = EvalCreate.model_validate(body)  # the API's own body model (strict types) accepts it
        assert created.suite == SuiteSpec.model_validate(suites[fold]) and created.output == str(tmp_path / "runs")
    assert requests["B"]["checkpoint"] == "rl-aaaaaaaaaaaa:export" and requests["B"]["suite"]["name"] == "learning-folds-b"


def _outcome(row: dict, functions: dict, index: int) -> RowOutcome:
    """The recorded row's completions scored as an eval job scores them (trainer/evals/scoring.py)."""
    answers = acceptable_answers(ANSWERS[row["id"]])
    completions = row["completions"]
    scores = score_row(
        functions,
        prompt="",
        question=row["question"],
        answers=answers,
        greedy=completions["greedy"],
        samples=completions["samples"],
        extractor="first-number",
    )
    return RowOutcome(
        id=row["id"],
        index=index,
        question=row["question"],
        answers=answers,
        greedy=completions["greedy"],
        samples=completions["samples"],
        functions=scores.functions,
    )


def _suite_functions() -> dict:
    """The suite's functions imported here, to check their logic (called positionally too): the bench's own file. An
    eval job runs them in the reward sandbox instead (trainer/evals/suite_rewards.py), never in its process."""
    spec = importlib.util.spec_from_file_location("learning_folds_scorings", evals.SCORINGS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: getattr(module, name) for name in FUNCTIONS}


RECORDED = json.loads(RESULT.read_text())["models"]


def test_the_suites_rewards_score_every_recorded_completion_as_the_bench_did():
    """Every completion of every model the bench recorded (4 models x 300 rows x 9), scored by the suite's reward
    file through the eval job's scoring and read back as bench rows, gives the recorded strict, lenient and format
    outcomes, which the bench's score() still reproduces."""
    functions, bench_rewards = _suite_functions(), load_rewards()
    compared = 0
    for model in RECORDED.values():
        for index, row in enumerate(model["rows"]):
            got = evals.bench_row(_outcome(row, functions, index))
            assert {k: got[k] for k in ("id", "greedy", "samples", "lenient", "format")} == {
                k: row[k] for k in ("id", "greedy", "samples", "lenient", "format")
            }
            answer = json.dumps(acceptable_answers(ANSWERS[row["id"]]))
            for i, text in enumerate([row["completions"]["greedy"], *row["completions"]["samples"]]):
                bench = score(text, answer, bench_rewards)
                assert bench["strict"] == (row["greedy"] if i == 0 else row["samples"][i - 1])
                compared += 1
    assert compared == 4 * 300 * 9


def test_each_suite_function_is_one_of_scores_scorings_on_text_the_recorded_completions_lack():
    functions, rewards, answer = _suite_functions(), load_rewards(), json.dumps(["-3", "-3"])
    texts = ["\n The answer is -3.", "  -3", "3 - 6 = -3", "The answer is 3, or -3", "the answer is -3", "-3-3", "The answer is"]
    for text in texts:
        expected = score(text, answer, rewards)
        got = {scoring: functions[name]([""], [text], None, answer=[answer])[0] for scoring, name in evals.SCORING_FUNCTIONS.items()}
        assert got == {k: float(v) for k, v in expected.items()}, text


def test_strict_is_the_training_reward_on_the_numbers_it_treats_specially():
    strict, training = _suite_functions()["arith_correct"], load_rewards().arith_correct
    texts = ["1,234 apples", "85.0", "85.", "85.5", "-7 is it", "84, 85, 86", "85,86", "The answer is 0085.", "none", "", "1,23"]
    for gold in ("85", "1234", "-7", "1,234"):
        answer = [json.dumps([gold, gold])] * len(texts)
        assert strict([""] * len(texts), texts, None, answer=answer) == training([""] * len(texts), texts, None, answer=answer)
    assert strict(["p"], ["The answer is 1,234."], None, answer=[json.dumps(["1234", "1234"])]) == [1.0]


class _Service:
    """The client calls service_comparisons makes, answered with compare_outcomes over the recorded rows."""

    def __init__(self, outcomes: dict[str, list[RowOutcome]]) -> None:
        self.outcomes, self.asked = outcomes, []

    def eval_compare(self, a: str, b: str, function: str | None = None) -> EvalComparisonPublic:
        self.asked.append((a, b, function))
        comparison = compare_outcomes(self.outcomes[a], self.outcomes[b], function or "", resamples=200)
        side = {"name": "e", "checkpoint": EvalCheckpoint(format="huggingface"), "model_source": "/m", "chip_hours": 0.0, "cost_usd": 0.0}
        suite = EvalSuitePublic(
            name="learning-folds-b",
            scope="t",
            version=1,
            content_hash="0" * 16,
            rows=150,
            reward_functions=FUNCTIONS,
            sampling=EvalSampling(),
        )
        a_side, b_side = EvalSide(eval_id=a, **side), EvalSide(eval_id=b, **side)
        return EvalComparisonPublic(a=a_side, b=b_side, suite=suite, comparison=comparison, cost_per_point=[], cost_note="cpu")


def test_the_service_comparison_is_recorded_for_each_pair_evaluated_by_eval_jobs_and_reads_as_the_bench():
    functions, fold_b = _suite_functions(), {r["id"] for r in fold_rows()["B"]}
    rows = {name: [r for r in RECORDED[name]["rows"] if r["id"] in fold_b] for name in ("base", "trained", "control")}
    outcomes = {f"rl-{name:x<12}": [_outcome(r, functions, i) for i, r in enumerate(rs)] for name, rs in rows.items()}
    models = {name: {"rows": rs, "evaluation": {"evals": {"B": {"eval_id": f"rl-{name:x<12}"}}}} for name, rs in rows.items()}
    models["peer_trl"] = {"rows": RECORDED["peer_trl"]["rows"]}  # measured in process: no eval job to compare
    service = _Service(outcomes)
    found = evals.service_comparisons(service, models)  # type: ignore[arg-type]
    assert sorted(service.asked) == sorted(
        [
            ("rl-trainedxxxxx", "rl-basexxxxxxxx", "arith_correct"),
            ("rl-controlxxxxx", "rl-basexxxxxxxx", "arith_correct"),
            ("rl-trainedxxxxx", "rl-controlxxxxx", "arith_correct"),
        ]
    )
    assert set(found) == {"trained-base", "control-base", "trained-control"} and all(set(v) == {"B"} for v in found.values())
    bench = learning_stats.compare(rows, "trained", "base")
    service_view = found["trained-base"]["B"]["scores"]["pass@1"]
    assert service_view["difference"] == pytest.approx(bench["greedy"]["difference"])
    assert service_view["mcnemar_p"] == pytest.approx(bench["mcnemar_greedy"]["p"])
    assert found["trained-base"]["B"]["scores"]["sampled"]["difference"] == pytest.approx(bench["sampled"]["difference"])
