"""README passages whose figures come from result files in bench/results/, rendered by one script.

Each section sits between `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->` in README.md and is
a pure function of its result file(s); tests/bench/test_readme_sections.py fails when the README and
the files disagree. After a bench writes a new result file:

    python bench/readme_sections.py            # rewrite every section
    python bench/readme_sections.py --check    # exit 1 and name the sections that differ
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
README = REPO / "README.md"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return data


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s" if minutes else f"{rest}s"


def render_goodput_tiny(result: dict[str, Any]) -> str:
    """The tiny demo job's goodput, as bench/eval_panel_screenshot.py --tiny recorded it."""
    goodput = result["goodput"]
    wall, parts = goodput["wall_s"], goodput["parts"]
    shown = sorted(((name, s) for name, s in parts.items() if s >= 0.5), key=lambda item: -item[1])
    listed = ", ".join(f"{name} {s:.1f} s ({s / wall:.0%})" for name, s in shown)
    machine = result.get("machine") or {}
    where = (f" on {machine['cpu_count']} CPU cores (load {machine['load_average'][0]:.2f} at the start), commit "
             f"`{machine['commit']}`") if machine else ""  # fmt: skip
    return (
        f"The tiny demo job (`{result['spec']}`, job `{result['job_id']}`{where}, `bench/results/goodput-bar.json`): "
        f"{_duration(wall)} of wall time, {goodput['productive_fraction']:.1%} productive; {listed}. Its job page's "
        "bar is `bench/results/goodput-bar.png`."
    )


# name -> (result files, renderer of their contents in that order)
SECTIONS: dict[str, tuple[tuple[str, ...], Callable[..., str]]] = {
    "goodput-tiny": (("goodput-bar.json",), render_goodput_tiny),
}


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def rendered(name: str) -> str:
    files, render = SECTIONS[name]
    return render(*(load(f) for f in files))


def current(readme: str, name: str) -> str | None:
    begin, end = _markers(name)
    start, stop = readme.find(begin + "\n"), readme.find(end)
    if start < 0 or stop < start:
        return None
    return readme[start + len(begin) + 1 : stop].removesuffix("\n")


def replace(readme: str, name: str, text: str) -> str:
    begin, end = _markers(name)
    if current(readme, name) is None:
        raise SystemExit(f"README.md has no {begin} ... {end} block")
    start, stop = readme.find(begin + "\n"), readme.find(end)
    return readme[: start + len(begin) + 1] + text + "\n" + readme[stop:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a section differs from its files")
    args = parser.parse_args()
    readme = README.read_text()
    stale = [name for name in SECTIONS if current(readme, name) != rendered(name)]
    if args.check:
        for name in stale:
            print(f"README.md's bench:{name} section differs from {', '.join(SECTIONS[name][0])}", file=sys.stderr)
        return 1 if stale else 0
    for name in SECTIONS:
        readme = replace(readme, name, rendered(name))
    README.write_text(readme)
    print(f"rendered {len(SECTIONS)} section(s); {len(stale)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
