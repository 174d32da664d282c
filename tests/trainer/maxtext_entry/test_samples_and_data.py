"""Completion samples and the learning signal they measure; the offline GSM8K rows."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import numpy as np
import pytest

from trainer.contract import RunLayout, StepSamples, step_from_file_name
from trainer.contract.run.samples import MAX_SAMPLES_PER_STEP, MAX_TEXT_CHARS
from trainer.maxtext_entry.sample_recorder import build_step_samples, signal_groups

NOW = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("totals", "generations", "expected"),
    [
        ([1, 1, 0, 0], 2, (2, 0)),  # every group uniform: zero advantage everywhere
        ([1, 0, 0, 0], 2, (2, 1)),
        ([0.5, 0.25, 1, 1, 2, 2], 2, (3, 1)),
        ([3, 3, 3, 3], 4, (1, 0)),
        ([1, 2, 3], 2, (0, 0)),  # not a whole number of groups: no claim
    ],
)
def test_signal_counts_groups_whose_rewards_differ(totals, generations, expected):
    assert signal_groups(np.asarray(totals, dtype=float)[:, None], generations) == expected


def test_a_step_keeps_a_bounded_sample_with_each_functions_score():
    n = 12
    rewards = np.stack([np.arange(n, dtype=float), np.full(n, 0.5)], axis=1)
    rewards[3, 0] = math.nan
    samples = build_step_samples(
        7, 4, [f"p{i // 4}" for i in range(n)], ["x" * (MAX_TEXT_CHARS + 10)] + ["c"] * (n - 1), rewards, ["exact", "format"], now=NOW
    )
    assert (samples.step, samples.groups, samples.groups_with_signal, samples.completions) == (7, 3, 3, n)
    assert len(samples.samples) == MAX_SAMPLES_PER_STEP
    first = samples.samples[0]
    assert first.truncated and len(first.completion) == MAX_TEXT_CHARS and first.rewards == {"exact": 0.0, "format": 0.5}
    assert samples.samples[3].rewards["exact"] is None and samples.samples[3].total == 0.5  # NaN dropped, not the row
    assert [s.group for s in samples.samples] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert StepSamples.model_validate_json(samples.model_dump_json()) == samples


def test_samples_files_are_named_by_step():
    layout = RunLayout("gs://b/runs", "rl-abc")
    assert layout.samples_file(12) == "gs://b/runs/rl-abc/samples/train-000012.json"
    assert step_from_file_name("train-000012.json") == 12 and step_from_file_name("eval-000001.json") is None


def test_gsm8k_rows_are_real_eval_rows_and_disjoint_generated_train_rows(tmp_path):
    from trainer.cli import main

    # The default 2,000 rows: reasoning-gym repeats a few questions with this seed, which must be replaced.
    assert main(["make-data", "gsm8k", "--out", str(tmp_path / "a")]) == 0
    assert main(["make-data", "gsm8k", "--out", str(tmp_path / "b")]) == 0
    evaluation = [json.loads(line) for line in (tmp_path / "a" / "eval.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (tmp_path / "a" / "train.jsonl").read_text().splitlines()]
    assert len(evaluation) == 100 and len(train) == 2000
    assert len({r["question"] for r in train}) == 2000
    # GSM8K's own format: worked answer with <<calc>> annotations, last line '#### N'.
    assert all(set(r) == {"question", "answer"} and "\n#### " in r["answer"] for r in evaluation + train)
    assert sum("<<" in r["answer"] for r in evaluation) > 90
    assert {r["question"] for r in evaluation}.isdisjoint(r["question"] for r in train)
    assert not any("Give the result as your final answer" in r["question"] for r in train)
    # A fixed seed gives the same rows; the parquet files (what MaxText reads) hold the same rows.
    assert (tmp_path / "a" / "train.jsonl").read_text() == (tmp_path / "b" / "train.jsonl").read_text()
    import pyarrow.parquet as pq

    assert pq.read_table(str(tmp_path / "a" / "eval.parquet")).to_pylist() == evaluation
