"""`python -m trainer.maxtext_entry.train_rl_jax_entry [--rljob_shim_config=<json>] <train_rl args>`

Runs MaxText's train_rl unmodified with the rollout engine swapped for pure JAX. train_rl imports
its vLLM rollout (-> vllm) and vLLM adapter (-> tpu_inference) at import time; both are installed
here, under the module names train_rl imports, before train_rl is loaded.
"""

from __future__ import annotations

import importlib
import sys
import types

VLLM_ROLLOUT_MODULE = "maxtext.integration.vllm.maxtext_vllm_rollout"
VLLM_ADAPTER_MODULE = "maxtext.integration.vllm.maxtext_vllm_adapter"


def _install_module(name: str, module: types.ModuleType) -> None:
    # `import a.b.c as x` resolves through the parent package's attribute, not only sys.modules.
    parent_name, _, child = name.rpartition(".")
    sys.modules[name] = module
    setattr(importlib.import_module(parent_name), child, module)


def install_jax_rollout() -> None:
    from trainer.rollout.jax_rollout import JaxMaxTextRollout

    rollout_module = types.ModuleType(VLLM_ROLLOUT_MODULE)
    # A module built at run time: mypy cannot know the attributes it is given.
    rollout_module.MaxTextVllmRollout = JaxMaxTextRollout  # type: ignore[attr-defined]
    _install_module(VLLM_ROLLOUT_MODULE, rollout_module)

    adapter_module = types.ModuleType(VLLM_ADAPTER_MODULE)
    # train_rl calls adapter.register() to hook MaxText models into vLLM; there is no vLLM here.
    adapter_module.register = lambda config=None: None  # type: ignore[attr-defined]  # built at run time
    _install_module(VLLM_ADAPTER_MODULE, adapter_module)


if __name__ == "__main__":
    from .train_rl_entry import main

    main(sys.argv[1:], swap_rollout_engine=install_jax_rollout)
