"""Run as a script: `save DIR` or `restore DIR`, through Tunix's CheckpointManager with the options
train_rl gives it for a job's defaults (save every step, keep 1: trainer/stages/train.py renders
checkpoint_period and max_num_checkpoints_to_keep; Tunix passes them to Orbax).

`save` writes step 1 and waits for it, then starts step 2 (a different value, large enough that its
asynchronous write takes a while), prints `WRITING 2` and waits to be killed.
`restore` prints one JSON line: the latest step Tunix finds and whether its arrays are step 1's.
"""

import json
import logging
import sys
import time

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from tunix.sft.checkpoint_manager import CheckpointManager

logging.getLogger("gcsfs").setLevel(logging.ERROR)  # "no default credentials" is expected here
SIZE = 48 * 1024 * 1024 // 4  # 48 MiB of fp32 per array, two arrays
OPTIONS = ocp.CheckpointManagerOptions(save_interval_steps=1, max_to_keep=1)  # train_rl.py's, keep_last 1


class Weights(nnx.Module):
    def __init__(self, value: float) -> None:
        self.w = nnx.Param(jnp.full((SIZE,), value, jnp.float32))
        self.b = nnx.Param(jnp.full((SIZE,), -value, jnp.float32))


def save(directory: str) -> None:
    manager = CheckpointManager(directory, OPTIONS)
    manager.save(1, Weights(1.0))
    manager._checkpoint_manager.wait_until_finished()  # step 1 is whole before step 2 starts
    manager.save(2, Weights(2.0))
    print("WRITING 2", flush=True)
    time.sleep(600)


def restore(directory: str) -> None:
    manager = CheckpointManager(directory, OPTIONS)
    step = manager.latest_step()
    target = {"w": {"value": np.zeros((SIZE,), np.float32)}, "b": {"value": np.zeros((SIZE,), np.float32)}}
    restored = manager._checkpoint_manager.restore(step, args=ocp.args.Composite(model_params=ocp.args.PyTreeRestore(item=target)))[
        "model_params"
    ]
    whole_step_1 = bool(np.all(np.asarray(restored["w"]["value"]) == 1.0) and np.all(np.asarray(restored["b"]["value"]) == -1.0))
    print(json.dumps({"latest_step": step, "whole_step_1": whole_step_1}))


if __name__ == "__main__":
    {"save": save, "restore": restore}[sys.argv[1]](sys.argv[2])
