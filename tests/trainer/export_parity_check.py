"""Run as a subprocess: a Hugging Face export against the MaxText checkpoint it was exported from.

`python export_parity_check.py HF_DIR MAXTEXT_PARAMS MODEL_NAME OVERRIDE...` builds MaxText's model (fp32) on
MAXTEXT_PARAMS (a converted `0/items` or an actor's `model_params`) under MODEL_NAME with the job's overrides,
runs it and the export (transformers, fp32) on one tokenized text, and prints one JSON line:
maxtext_parity_check.hf_forward's result (the largest absolute logit difference, the logit scale, and for a
tied model the difference once the HF side rounds its embedding table to bf16 for the logits, as MaxText 0.2.5
does). A separate process so MaxText/JAX state stays out of pytest's.
"""

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from maxtext_parity_check import FP32_FORWARD, ITEMS_READ, TEXTS, hf_forward


def main() -> None:
    hf_dir, params, model_name, *overrides = sys.argv[1:]
    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils
    from transformers import AutoTokenizer

    from trainer.stages.maxtext_paths import base_config

    ids = AutoTokenizer.from_pretrained(hf_dir)(TEXTS[0])["input_ids"]
    config = pyconfig.initialize(
        [
            "",
            base_config(),
            f"model_name={model_name}",
            f"load_parameters_path={params}",
            *FP32_FORWARD,
            *ITEMS_READ,
            f"max_target_length={len(ids)}",
            "max_prefill_predict_length=8",
            "run_name=export-parity-check",
            f"base_output_directory={os.environ.get('TMPDIR', '/tmp')}/export-parity-check",
            *overrides,
        ]
    )
    model, mesh = model_creation_utils.from_pretrained(config)
    print(json.dumps(hf_forward(model, mesh, hf_dir, ids)))


if __name__ == "__main__":
    main()
