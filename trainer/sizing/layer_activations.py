"""Where the update keeps what its backward pass saves of each layer (issue 67 §1), chosen per job from the fit estimate.

rl.yml (MaxText 0.2.5, configs/post_train/rl.yml:90-94) sets remat_policy 'custom' and offloads four tensors of every
layer to host memory: the layer's input and its query, key and value projections. On the v5e chip the copies took a
quarter to two fifths of the update's device time (bench/chip/README.md, the update term by term), and the 360M
shape's update ran faster with them kept in HBM (bench/results/tpu_grpo_layers_in_hbm.json). Kept, they are the update
program's temporaries (fit_phases.saved_layer_activations), so a job keeps them where the estimate says that still
fits with room, and offloads them where it does not (fit.keeps_layers_in_hbm).

`hardware.layer_activations`: `auto` (that choice), `hbm` (kept; refused at submit where it does not fit) or
`offload` (rl.yml's). On cpu nothing is passed.
"""

from __future__ import annotations

from trainer.contract.spec.job import JobSpec

from .fit import keeps_layers_in_hbm
from .model_shapes import ModelShape

# MaxText's `device` for each tensor rl.yml offloads (base.yml: 'remat', 'device' or 'offload' per tensor).
KEPT_IN_HBM_ARGS = ("decoder_layer_input=device", "query_proj=device", "key_proj=device", "value_proj=device")


def layer_activation_args(spec: JobSpec, shape: ModelShape | None) -> list[str]:
    """The MaxText settings that keep the layers in HBM, after rl.yml on the command line (MaxText takes the last)."""
    return list(KEPT_IN_HBM_ARGS) if keeps_layers_in_hbm(spec, shape) else []
