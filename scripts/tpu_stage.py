#!/usr/bin/env python3
"""Stage rljob for the TPU machine lent to this project (no network, Python 3.12 without rljob's packages), and
print the device calls that carry it there (docs/tpu-vm.md, "The TPU machine lent to this project").

Here, from the checkout's root, with the project's venv:
    .venv/bin/python scripts/tpu_stage.py trace       # what a TPU host imports -> scripts/tpu_staging/host_requirements.txt
    .venv/bin/python scripts/tpu_stage.py build       # its wheels in chunks under .tpu-stage/, the calls in .tpu-stage/PLAN.txt

On the chip, one device call a chunk, then the install (the machine's python3, 3.11, runs these):
    python3 scripts/tpu_stage.py unpack .tpu-stage/cK                # carry [".tpu-stage/cK"]
    python3 scripts/tpu_stage.py install --stage /tmp/rljob-stage    # a Python 3.12 venv, /tmp/rljob-env.sh
    python3 scripts/tpu_stage.py check --stage /tmp/rljob-stage --expect-tpu
then each run: `. /tmp/rljob-env.sh && python -m trainer ...`. The code is in scripts/tpu_staging/.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tpu_staging.layout import StageError

DEFAULT_STAGE = "/tmp/rljob-stage"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/tpu_stage.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    trace = commands.add_parser("trace", help="here: find what a TPU host imports; write the host requirements")
    build = commands.add_parser("build", help="here: download, split and pack the wheels; write the manifest and the plan")
    unpack = commands.add_parser("unpack", help="on the chip: land one carried chunk in the stage folder, checked")
    unpack.add_argument("chunk", help="the carried chunk folder, e.g. .tpu-stage/c0")
    install = commands.add_parser("install", help="on the chip: join, install into a Python 3.12 venv, write the env file")
    install.add_argument("--stage", default=DEFAULT_STAGE, help="the stage folder (default: %(default)s)")
    install.add_argument("--python", help="the Python 3.12 to use (default: $PYTHON, python3.12, python3, pyenv's)")
    check = commands.add_parser("check", help="on the chip: versions, imports, the trainer's CLI, what JAX sees")
    check.add_argument("--stage", default=DEFAULT_STAGE, help="the stage folder (default: %(default)s)")
    check.add_argument("--expect-tpu", action="store_true", help="fail unless JAX sees a TPU")
    if "trace" in argv[:1] or "build" in argv[:1]:
        # Only here: the chip's python3 has neither the project nor its venv.
        from tpu_staging import build as build_module
        from tpu_staging import trace as trace_module

        trace_module.add_arguments(trace)
        build_module.add_arguments(build)
    args = parser.parse_args(argv)
    try:
        if args.command == "trace":
            return trace_module.trace(args)
        if args.command == "build":
            return build_module.run(build, args)
        from tpu_staging import chip

        if args.command == "unpack":
            return chip.unpack(Path(args.chunk))
        if args.command == "install":
            return chip.install(Path(args.stage), args.python)
        return chip.check(Path(args.stage), args.expect_tpu)
    except StageError as e:
        print(f"tpu_stage: {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"tpu_stage: {' '.join(map(str, e.cmd))[:300]} failed with exit {e.returncode} (its output is above)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
