"""The entry shim's reward sandbox against the installed MaxText and Tunix (trainer/maxtext_entry/reward_sandbox.py):
train_rl's own reward-loading call gets sandboxed stand-ins and never imports the user's file in this process, and
Tunix's reward manager, calling them as it calls any reward, logs the sandbox's counts with the step's metrics."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import multiprocessing.pool  # noqa: F401 - MaxText's utils_rl needs it imported first (train_rl_entry.py)
import os
import sys
from pathlib import Path

import pytest

from trainer.contract.run.samples import tunix_metric_name
from trainer.contract.spec.reward_sandbox import (
    CALLS_METRIC,
    ERRORS_METRIC,
    NETWORK_ISOLATED_METRIC,
    TIMEOUTS_METRIC,
    RewardSandboxSettings,
)
from trainer.maxtext_entry import reward_sandbox
from trainer.rewards_sandbox.proxy import SandboxedReward

REWARDS = """
import os
IMPORTED_IN = os.getpid()  # the worker may write nowhere outside its own directory: the pid comes back as a score

def imported_in(prompts, completions, **kwargs):
    return [float(IMPORTED_IN)] * len(completions)

def length(prompts, completions, tmvp_config, **kwargs):
    return [float(len(c)) + tmvp_config.reward_exact_answer for c in completions]

def raises(prompts, completions, **kwargs):
    raise ValueError("a bug in the user's reward")
"""


@pytest.fixture
def installed(tmp_path, monkeypatch):
    from maxtext.trainers.post_train.rl import utils_rl
    from tunix.rl import reward_manager

    # install() patches both for the life of train_rl's process; a test puts them back.
    monkeypatch.setattr(utils_rl, "load_custom_callable", utils_rl.load_custom_callable)
    monkeypatch.setattr(reward_manager.SequenceRewardManager, "_compute_rewards", reward_manager.SequenceRewardManager._compute_rewards)
    path = tmp_path / "job_rewards.py"
    path.write_text(REWARDS)
    argv = [f"reward_functions_path={path}", "reward_functions=length,raises,imported_in", "model_name=llama3.1-8b"]
    settings = RewardSandboxSettings(timeout_s=10, memory_mib=2048, on_error="zero")
    sandbox = reward_sandbox.install(argv, settings)
    assert sandbox is not None
    yield utils_rl, reward_manager, path
    sandbox.close()


def test_train_rl_loads_its_reward_functions_through_the_call_the_shim_wraps():
    """Read, not imported (importing train_rl costs most of a minute): the installed train_rl loads rewards, and only
    rewards, with importable_by_workers=True, and Tunix's manager has the method the metrics wrap."""
    from tunix.rl import reward_manager

    (maxtext_dir,) = importlib.util.find_spec("maxtext").submodule_search_locations or []
    source = (Path(maxtext_dir) / "trainers" / "post_train" / "rl" / "train_rl.py").read_text()
    assert "utils_rl.load_custom_callable(custom_rewards_path, n, importable_by_workers=True)" in source
    assert source.count("importable_by_workers=True") == 1
    assert 'utils_rl.load_custom_callable(_custom_processor_path, "process_data")' in source
    assert "prompts" in inspect.signature(reward_manager.SequenceRewardManager._compute_rewards).parameters


def test_maxtexts_loader_returns_sandboxed_stand_ins_and_never_imports_the_file_here(installed):
    utils_rl, _, path = installed
    fn = utils_rl.load_custom_callable(str(path), "length", importable_by_workers=True)
    assert isinstance(fn, SandboxedReward) and fn.__name__ == "length"

    class Config:
        def get_keys(self):
            return {"reward_exact_answer": 0.5}

    assert fn(prompts=["q"], completions=["abcd"], tmvp_config=Config()) == [4.5]
    (imported_in,) = utils_rl.load_custom_callable(str(path), "imported_in", importable_by_workers=True)(prompts=["q"], completions=["a"])
    assert imported_in > 0 and imported_in != os.getpid()  # imported, in a worker only
    assert not any(getattr(m, "__file__", None) == str(path) for m in list(sys.modules.values()))


def test_tunixs_reward_manager_scores_a_failed_call_zero_and_logs_the_sandbox_counts(installed):
    utils_rl, reward_manager, path = installed

    @dataclasses.dataclass
    class AlgoConfig:  # what the manager reads of GrpoConfig: its fields, matched against the functions' parameters
        num_generations: int = 2

    class Config:
        def get_keys(self):
            return {"reward_exact_answer": 1.0}

    def with_config(fn):
        return lambda **kwargs: fn(tmvp_config=Config(), **kwargs)

    functions = [utils_rl.load_custom_callable(str(path), name, importable_by_workers=True) for name in ("length", "raises")]
    manager = reward_manager.SequenceRewardManager([with_config(fn) for fn in functions], AlgoConfig())
    info = manager(prompts=["q", "q"], completions=["ab", "abc"], mode="train")
    assert list(info["rewards"]) == [3.0, 4.0]  # length + exact_answer, and 0 for the call that raised
    metrics = info["log_metrics"]
    assert metrics[tunix_metric_name(CALLS_METRIC)][0].tolist() == [2]
    assert metrics[tunix_metric_name(ERRORS_METRIC)][0].tolist() == [1]
    assert metrics[tunix_metric_name(TIMEOUTS_METRIC)][0].tolist() == [0]
    assert metrics[tunix_metric_name(NETWORK_ISOLATED_METRIC)][0].tolist() in ([0.0], [1.0])
    json.dumps({k: v[0].tolist() for k, v in metrics.items() if k.startswith("rewards/sandbox")})
