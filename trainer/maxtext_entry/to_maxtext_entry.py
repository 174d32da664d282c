"""`python -m trainer.maxtext_entry.to_maxtext_entry [--rljob_register_hf_config=SRC] <to_maxtext args>`"""

from __future__ import annotations

import sys

from .hf_config_registry import register_from_argv, run_as_main

TO_MAXTEXT_MODULE = "maxtext.checkpoint_conversion.to_maxtext"

if __name__ == "__main__":
    run_as_main(TO_MAXTEXT_MODULE, register_from_argv(sys.argv[1:]))
