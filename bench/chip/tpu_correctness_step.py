"""The GRPO step's patches on the machine it runs on: the stop token (stop_token.py) and the objective (grpo_objective.py),
with the evidence tests/trainer/rollout/test_stop_token.py and tests/trainer/maxtext_entry/test_grpo_objective.py take on
CPU; used by bench/chip/tpu_correctness.py.

    python -m bench.chip.tpu_correctness_step      # the objective probe: run by step_checks as a subprocess
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "tests" / "trainer"
TRAIN_RL_MODULE = "maxtext.trainers.post_train.rl.train_rl"
OBJECTIVE_LINE_PREFIX = "RLJOB_OBJECTIVE_PROBE "
EPSILON_HIGH = 0.28  # test_grpo_objective.py's upper clip
# train_rl's own GrpoConfig call takes these (test_grpo_objective.py's values); the patch must keep every one.
TRAIN_RL_CALL = {
    "num_generations": 2,
    "num_iterations": 1,
    "beta": 0.04,
    "epsilon": 0.2,
    "loss_algo": "grpo",
    "loss_agg_mode": "sequence-mean-token-scale",
}


def import_check(name: str) -> ModuleType:
    """A check module of tests/trainer by its path (bench/ does not import the tests package). They default
    JAX_PLATFORMS to cpu for themselves; the chip's run and its subprocesses must keep what was asked."""
    before = os.environ.get("JAX_PLATFORMS")
    sys.path.insert(0, str(CHECKS))  # qwen3_rollout_check imports its sibling by name
    try:
        spec = importlib.util.spec_from_file_location(name, CHECKS / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(CHECKS))
        if before is None:
            os.environ.pop("JAX_PLATFORMS", None)
        else:
            os.environ["JAX_PLATFORMS"] = before
    return module


def expected_stop_token_step(step_module: ModuleType) -> dict[str, Any]:
    """test_stop_token.py's STOP_TOKEN_COUNTED, read from its source (importing it needs pytest) with its E and P."""
    path = CHECKS / "rollout" / "test_stop_token.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    node = next(
        n for n in tree.body if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "STOP_TOKEN_COUNTED" for t in n.targets)
    )
    expected: dict[str, Any] = eval(
        compile(ast.Expression(node.value), str(path), "eval"), {"__builtins__": {}, "E": step_module.EOS, "P": step_module.PAD}
    )
    return expected


def stop_token_verdict(step: dict[str, Any], step_module: ModuleType) -> dict[str, Any]:
    expected = expected_stop_token_step(step_module)
    seen = {name: step.get(name) for name in expected}
    completions, width = step_module.COMPLETIONS, step_module.WIDTH
    # What test_stop_token.py asserts of these metrics: the share of empty completions and of those that stopped.
    fractions = (sum(len(c) == 0 for c in completions) / len(completions), sum(len(c) < width for c in completions) / len(completions))
    metrics = step.get("metrics", {})
    got = (metrics.get("completions/empty_fraction"), metrics.get("completions/stopped_fraction"))
    return {
        "active": seen == expected and got == fractions and step.get("module") == TRAIN_RL_MODULE,
        "masks_equal_stop_token_counted": seen == expected,
        "expected": expected,
        "seen": seen,
        "empty_and_stopped_fraction": {"expected": list(fractions), "seen": list(got)},
    }


def objective_shim_args() -> list[str]:
    """The shim configuration's argument with the objective only, as the train stage passes it."""
    from trainer.contract.run.shim_config import GrpoObjective, ShimConfig
    from trainer.stages.train import KL_LOSS_MODES

    return [ShimConfig(objective=GrpoObjective(kl_loss_mode=KL_LOSS_MODES["k3"], epsilon_high=EPSILON_HIGH)).as_argument()]


def objective_verdict(probe: dict[str, Any]) -> dict[str, Any]:
    from trainer.stages.train import KL_LOSS_MODES

    resolved = probe.get("resolved", {})
    kept = {k: resolved.get(k) for k in TRAIN_RL_CALL}
    active = (
        resolved.get("kl_loss_mode") == KL_LOSS_MODES["k3"]
        and resolved.get("epsilon_high") == EPSILON_HIGH
        and kept == TRAIN_RL_CALL
        and probe.get("is_tunix_subclass") is True
    )
    return {
        "active": active,
        "kl_loss_mode": resolved.get("kl_loss_mode"),
        "epsilon_high": resolved.get("epsilon_high"),
        "train_rl_arguments_kept": kept == TRAIN_RL_CALL,
    }


def _objective_probe() -> None:
    """In train_rl's place under the entry shim's main: GrpoConfig as train_rl's own call builds it."""
    from trainer.maxtext_entry import train_rl_entry

    def in_train_rls_place(module: str, maxtext_argv: list[str]) -> None:
        from tunix.rl.grpo import grpo_learner
        from tunix.rl.grpo.grpo_learner import GrpoConfig  # as train_rl imports it

        config = GrpoConfig(**TRAIN_RL_CALL)
        tunix = getattr(GrpoConfig, "rljob_tunix_class", None)
        probe = {
            "module": module,
            "resolved": {k: v for k, v in dataclasses.asdict(config).items() if isinstance(v, (str, int, float, bool, type(None)))},
            "is_tunix_subclass": tunix is not None and isinstance(config, tunix) and grpo_learner.GRPOConfig is GrpoConfig,
        }
        print(OBJECTIVE_LINE_PREFIX + json.dumps(probe), flush=True)

    train_rl_entry.run_as_main = in_train_rls_place
    train_rl_entry.main(objective_shim_args())


def block_torch() -> None:
    """Torch as on a machine without it: a path that needs it fails here as it would on the chip."""
    loaded = sorted(name for name, module in sys.modules.items() if module is not None and name.split(".")[0] == "torch")
    assert not loaded, f"torch was imported before the block: {loaded[:3]}"
    sys.modules["torch"] = None  # type: ignore[assignment]  # the import system's own "not importable" mark


def torch_loaded() -> bool:
    return any(module is not None and name.split(".")[0] == "torch" for name, module in sys.modules.items())


# `python -m MODULE ARGS...` with torch blocked first, and a check at its exit that none was loaded.
WITHOUT_TORCH = (
    "import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True); "
    "assert not [n for n, m in sys.modules.items() if m is not None and n.split('.')[0] == 'torch'], 'torch was loaded'"
)


def _subprocess_line(module: str, args: list[str], prefix: str, log: Path) -> dict[str, Any] | None:
    """The JSON after `prefix` on the stdout of `python -m module args` run without torch; None if it failed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-c", WITHOUT_TORCH, module, *args]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    log.write_text(f"exit {proc.returncode}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith(prefix)]
    return json.loads(lines[-1].removeprefix(prefix)) if lines and proc.returncode == 0 else None


def step_checks(out: Path) -> dict[str, Any]:
    step_module = import_check("grpo_learner_step")
    step = _subprocess_line(
        "tests.trainer.grpo_learner_step", objective_shim_args(), step_module.STEP_LINE_PREFIX, out / "grpo_learner_step.log"
    )
    probe = _subprocess_line("bench.chip.tpu_correctness_step", [], OBJECTIVE_LINE_PREFIX, out / "objective_probe.log")
    stop = stop_token_verdict(step, step_module) if step else {"active": False, "error": "no STEP line; see grpo_learner_step.log"}
    objective = objective_verdict(probe) if probe else {"active": False, "error": "no probe line; see objective_probe.log"}
    print("stop-token fix active:", stop["active"], "| objective patch active:", objective["active"], flush=True)
    return {
        "learner_step_command": ["-m", "tests.trainer.grpo_learner_step", *objective_shim_args()],
        "step_line": step,
        "stop_token": stop,
        "objective_probe": probe,
        "objective": objective,
    }


if __name__ == "__main__":
    block_torch()
    _objective_probe()
