"""`python -m trainer.maxtext_entry.to_maxtext_entry [--rljob_register_hf_config=SRC] <to_maxtext args>`"""

from __future__ import annotations

import runpy
import sys

from .hf_config_registry import model_name_from_argv, pop_registration_args, register_hf_config

TO_MAXTEXT_MODULE = "maxtext.checkpoint_conversion.to_maxtext"


def main() -> None:
    source, revision, maxtext_argv = pop_registration_args(sys.argv[1:])
    if source:
        register_hf_config(model_name_from_argv(maxtext_argv), source, revision)
    # to_maxtext does its argument parsing under `if __name__ == "__main__"`, so run it as the main module.
    sys.argv = [TO_MAXTEXT_MODULE, *maxtext_argv]
    runpy.run_module(TO_MAXTEXT_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
