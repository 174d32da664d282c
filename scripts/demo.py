#!/usr/bin/env python3
"""The main job on the embedded default: see service/cli/demo.py (also `rljob demo`).

Usage: scripts/demo.py [--spec examples/tiny-cpu.yaml] [--work-dir var/demo]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from service.cli.client import CliError
from service.cli.demo import run_demo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=Path("examples/tiny-cpu.yaml"))
    parser.add_argument("--work-dir", type=Path, default=Path("var/demo"))
    args = parser.parse_args()
    console = Console()
    try:
        return run_demo(args.spec, args.work_dir, console)
    except CliError as e:
        console.print(f"[red]demo failed:[/] {e.message}", highlight=False)
        return e.exit_code
    except KeyboardInterrupt:
        console.print("interrupted; the service was stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
