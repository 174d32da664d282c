"""`python -m trainer.maxtext_entry.to_huggingface_entry [--rljob_shim_config=<json>] <to_huggingface args>`"""

from __future__ import annotations

import sys

from .hf_config_registry import conversion_argv, run_as_main

TO_HUGGINGFACE_MODULE = "maxtext.checkpoint_conversion.to_huggingface"

if __name__ == "__main__":
    run_as_main(TO_HUGGINGFACE_MODULE, conversion_argv(sys.argv[1:]))
