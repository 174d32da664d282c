"""The train entry installs what its shim configuration asks, in INSTALLS' order (trainer/maxtext_entry/train_rl_entry.py),
and the order's stated reasons hold on the real Tunix and MaxText objects: where two installs wrap the same function,
the later one's wrapper is outside. The wrapped functions are read in a subprocess, as a train stage's own process
holds them (the installs replace names in Tunix's and MaxText's modules for good)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainer.contract.run.shim_config import SHIM_CONFIG_FLAG, BestCheckpointPaths, GrpoObjective, ShimConfig
from trainer.maxtext_entry import train_rl_entry

REPO = Path(__file__).resolve().parents[3]

# Run in the subprocess: main with every install the train stage asks for, then, in train_rl's place, which module's
# wrapper is outermost on each function two installs wrap, and which module's function it wraps.
WRAPPERS = r"""
import inspect, json, sys
from trainer.maxtext_entry import train_rl_entry

def chain(fn):
    # The files of the wrappers around a function, outermost first, down to its own (the code's file: functools.wraps
    # copies the wrapped function's __module__): each stand-in keeps what it wraps in __wrapped__ or in its closure.
    modules = []
    while fn is not None and len(modules) < 12:
        code = getattr(fn, "__code__", None)
        modules.append("/".join(code.co_filename.split("/")[-2:]) if code else fn.__module__)
        wrapped = getattr(fn, "__wrapped__", None)
        if wrapped is None and inspect.isfunction(fn):
            wrapped = next((v for v in inspect.getclosurevars(fn).nonlocals.values() if inspect.isfunction(v)), None)
        fn = wrapped
    return modules

def in_train_rls_place(module, maxtext_argv):
    from maxtext.trainers.post_train.rl import evaluate_rl
    from tunix.rl import rl_cluster, rl_learner
    found = {
        name: chain(fn)
        for name, fn in (
            ("evaluate", evaluate_rl.evaluate),
            ("generate", rl_cluster.RLCluster.generate),
            ("train", rl_learner.RLLearner.train),
            ("sync_weights", rl_cluster.RLCluster.sync_weights),
        )
    }
    print("WRAPPERS " + json.dumps({"found": found, "maxtext_argv": maxtext_argv}), flush=True)

train_rl_entry.run_as_main = in_train_rls_place
train_rl_entry.main(sys.argv[1:])
"""


def test_main_installs_every_entry_of_the_table_in_order_and_hands_maxtext_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    seen: list[Any] = []
    table = tuple(
        train_rl_entry.Install(step.name, lambda run, name=step.name: (ran.append(name), seen.append(run.config)), step.why_here)
        for step in train_rl_entry.INSTALLS
    )
    monkeypatch.setattr(train_rl_entry, "INSTALLS", table)
    handed: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(train_rl_entry, "run_as_main", lambda module, argv: handed.append((module, argv)))
    config = ShimConfig(samples_uri="/s", objective=GrpoObjective(kl_loss_mode="low_var_kl"))
    train_rl_entry.main(["rl.yml", config.as_argument(), "model_name=llama3.1-8b"])
    assert ran == [step.name for step in train_rl_entry.INSTALLS]
    assert seen[0] == config
    assert handed == [(train_rl_entry.TRAIN_RL_MODULE, ["rl.yml", "model_name=llama3.1-8b"])]


def test_a_shim_configuration_given_twice_is_refused() -> None:
    argument = ShimConfig(samples_uri="/s").as_argument()
    with pytest.raises(SystemExit, match="given 2 times"):
        train_rl_entry.main([argument, argument])


def test_the_table_names_what_fixes_each_place_and_goodput_is_last() -> None:
    names = [step.name for step in train_rl_entry.INSTALLS]
    assert len(set(names)) == len(names) and names[-1] == "goodput"
    assert all(step.why_here for step in train_rl_entry.INSTALLS)
    # Each install function of the table is one the entry module wires (no step left out of main's loop).
    assert "for step in INSTALLS" in inspect.getsource(train_rl_entry.main)


@pytest.mark.timeout(300)
def test_on_the_real_modules_goodput_times_the_other_wrappers_and_a_stop_comes_after_the_recorder(tmp_path: Path) -> None:
    best = BestCheckpointPaths(best_root=str(tmp_path / "best"), record_uri=str(tmp_path / "best.json"), actor_root=str(tmp_path / "a"))
    config = ShimConfig(
        samples_uri=str(tmp_path / "samples"), objective=GrpoObjective(kl_loss_mode="low_var_kl"), rollout_seed=3, best_checkpoint=best
    )
    done = subprocess.run(
        [sys.executable, "-c", WRAPPERS, "rl.yml", config.as_argument(), "model_name=llama3.1-8b"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WRAPPERS ")), None)
    assert line is not None, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(line.removeprefix("WRAPPERS "))
    assert report["maxtext_argv"] == ["rl.yml", "model_name=llama3.1-8b"]  # MaxText never sees the shim configuration
    assert not any(SHIM_CONFIG_FLAG in arg for arg in report["maxtext_argv"])
    found = report["found"]
    goodput, evals, stop, keys, stop_token = (
        "maxtext_entry/goodput_recorder.py",
        "maxtext_entry/eval_recorder.py",
        "maxtext_entry/graceful_stop.py",
        "rollout/rollout_keys.py",
        "rollout/stop_token.py",
    )
    # Recording an evaluation's rows is timed as eval (goodput's timer, then its report after each evaluation).
    assert found["evaluate"] == [goodput, goodput, evals, "rl/evaluate_rl.py"], found
    # The rollout's key, stop token and the engine's log-probabilities are timed as rollout; the key's wrapper sees
    # Tunix's own generate's signature (the agreement's wrapper keeps it with functools.wraps).
    agreement = "maxtext_entry/logprob_agreement.py"
    assert found["generate"] == [goodput, stop_token, keys, agreement, "rl/rl_cluster.py"], found
    # A stop's exit comes after the recorder and the best-checkpoint keeper have marked training finished; the keeper's
    # candidate save at a weight sync is timed as weight sync (the keeper installs with the evaluation recorder).
    keeper = "maxtext_entry/best_checkpoint.py"
    assert found["train"] == [goodput, stop, keeper, evals, "rl/rl_learner.py"], found
    assert found["sync_weights"] == [goodput, goodput, keeper, "rl/rl_cluster.py"], found
