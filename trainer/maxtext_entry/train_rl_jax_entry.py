"""`python -m trainer.maxtext_entry.train_rl_jax_entry [--rljob_register_hf_config=SRC] <train_rl args>`

Runs MaxText's train_rl unmodified with the rollout engine swapped for pure JAX. train_rl imports
its vLLM rollout (-> vllm) and vLLM adapter (-> tpu_inference) at import time; both are installed
here, under the module names train_rl imports, before train_rl is loaded.
"""

from __future__ import annotations

import importlib
import runpy
import sys
import types

from .hf_config_registry import model_name_from_argv, pop_registration_args, register_hf_config

TRAIN_RL_MODULE = "maxtext.trainers.post_train.rl.train_rl"
VLLM_ROLLOUT_MODULE = "maxtext.integration.vllm.maxtext_vllm_rollout"
VLLM_ADAPTER_MODULE = "maxtext.integration.vllm.maxtext_vllm_adapter"


def _install_module(name: str, module: types.ModuleType) -> None:
    # `import a.b.c as x` resolves through the parent package's attribute, not only sys.modules.
    parent_name, _, child = name.rpartition(".")
    sys.modules[name] = module
    setattr(importlib.import_module(parent_name), child, module)


def install_jax_rollout() -> None:
    from .jax_rollout import JaxMaxTextRollout

    rollout_module = types.ModuleType(VLLM_ROLLOUT_MODULE)
    rollout_module.MaxTextVllmRollout = JaxMaxTextRollout
    _install_module(VLLM_ROLLOUT_MODULE, rollout_module)

    adapter_module = types.ModuleType(VLLM_ADAPTER_MODULE)
    # train_rl calls adapter.register() to hook MaxText models into vLLM; there is no vLLM here.
    adapter_module.register = lambda config=None: None
    _install_module(VLLM_ADAPTER_MODULE, adapter_module)


def main() -> None:
    # MaxText's reward helpers start a spawn pool; importing it first avoids a hang seen in 0.2.5.
    import multiprocessing.pool  # noqa: F401

    source, revision, maxtext_argv = pop_registration_args(sys.argv[1:])
    if source:
        register_hf_config(model_name_from_argv(maxtext_argv), source, revision)
    install_jax_rollout()
    sys.argv = [TRAIN_RL_MODULE, *maxtext_argv]
    runpy.run_module(TRAIN_RL_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
