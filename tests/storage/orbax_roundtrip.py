"""Run as a script: save a small pytree with Orbax to a gs:// directory and restore it.

Exercises what MaxText's base_output_directory=gs://... relies on: Orbax's CheckpointManager over
tensorstore's GCS driver (TENSORSTORE_GCS_HTTP_URL) and gcsfs path operations (STORAGE_EMULATOR_HOST).
Prints one JSON line with the steps found and whether the restored arrays are equal.
"""

import json
import logging
import sys

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

logging.getLogger("gcsfs").setLevel(logging.ERROR)  # "no default credentials" is expected here


def main(directory: str) -> None:
    tree = {"decoder": {"w": jnp.arange(24, dtype=jnp.float32).reshape(4, 6)}, "embed": jnp.ones((8,), jnp.bfloat16)}
    options = ocp.CheckpointManagerOptions(max_to_keep=1)
    with ocp.CheckpointManager(directory, options=options) as manager:
        for step in (1, 2):  # two saves with max_to_keep=1: step 1 is deleted, as in a training run
            manager.save(step, args=ocp.args.StandardSave({k: v for k, v in tree.items()}))
            manager.wait_until_finished()
    with ocp.CheckpointManager(directory) as manager:
        steps = manager.all_steps()
        target = {"decoder": {"w": np.zeros((4, 6), np.float32)}, "embed": np.zeros((8,), jnp.bfloat16)}
        restored = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(target))
    equal = bool(
        np.array_equal(np.asarray(restored["decoder"]["w"]), np.asarray(tree["decoder"]["w"]))
        and np.array_equal(np.asarray(restored["embed"]), np.asarray(tree["embed"]))
    )
    print(json.dumps({"steps": list(steps), "equal": equal}))


if __name__ == "__main__":
    main(sys.argv[1])
