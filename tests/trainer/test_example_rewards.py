"""The reward file shipped in examples/, called the way MaxText/Tunix call it (numpy columns, tmvp_config)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np

from tests.trainer.conftest import REPO


def _rewards():
    spec = importlib.util.spec_from_file_location("gsm8k_answer_line", REPO / "examples" / "rewards" / "gsm8k_answer_line.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_answer_line_rewards_score_format_and_correctness_from_a_batch():
    rewards = _rewards()
    completions = ["2 + 3 = 5\n#### 5", "so it is 5", "#### 1,200\n", "#### 7"]
    # process_data stores each row's acceptable answers as a JSON string; grain batches them into an array.
    answer = np.asarray([json.dumps(["5", "5"]), json.dumps(["5", "5"]), json.dumps(["1200", "1200"]), json.dumps(["8"])])
    prompts = ["q"] * 4
    assert rewards.answer_line_format(prompts, completions, None, answer=answer) == [0.5, 0.0, 0.5, 0.5]
    assert rewards.answer_line_correct(prompts, completions, None, answer=answer, question=np.asarray(prompts)) == [1.0, 0.0, 1.0, 0.0]
