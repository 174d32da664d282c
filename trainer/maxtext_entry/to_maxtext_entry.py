"""`python -m trainer.maxtext_entry.to_maxtext_entry [--rljob_shim_config=<json>] <to_maxtext args>`"""

from __future__ import annotations

import sys

from .hf_config_registry import conversion_argv, run_as_main

TO_MAXTEXT_MODULE = "maxtext.checkpoint_conversion.to_maxtext"

if __name__ == "__main__":
    run_as_main(TO_MAXTEXT_MODULE, conversion_argv(sys.argv[1:]))
