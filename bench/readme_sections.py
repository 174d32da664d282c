"""The group READMEs' passages whose figures come from result files in bench/results/, rendered by one script.

Each section sits between `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->` in the README of its group
(bench/<group>/README.md; bench/README.md is the index) and is a pure function of its result file(s);
tests/bench/test_readme_sections.py fails when a page and the files disagree. A block whose begin marker is indented
(inside a list item) is indented as much. The renderers live in bench/readme_render/; SECTIONS below names each
block's files, renderer and group. After a bench writes a new result file:

    python bench/readme_sections.py            # rewrite every section
    python bench/readme_sections.py --check    # exit 1 and name the sections that differ

scripts/render_docs.py runs these renderers with the other generated pages'.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.readme_render import learning_benches, read_path_benches, service_benches, storage_benches  # noqa: E402
from bench.readme_render.common import duration  # noqa: E402
from bench.readme_render.estimate_bench import render_estimate_accuracy  # noqa: E402
from bench.readme_render.learning_folds_section import render_learning_folds, render_learning_folds_eval_check  # noqa: E402
from bench.readme_render.learning_seeds import render_learning_seeds, render_learning_shared_stream  # noqa: E402
from bench.readme_render.loss_agg_explore import render_loss_agg_explore  # noqa: E402
from bench.readme_render.sandbox_runtimes import render_reward_container_cost, render_sandbox_runtimes  # noqa: E402
from bench.readme_render.status_read import render_status_read, render_status_read_running  # noqa: E402
from bench.readme_render.tpu_agreement import render_tpu_agreement  # noqa: E402
from bench.readme_render.tpu_compile_cache import render_tpu_compile_cache  # noqa: E402
from bench.readme_render.tpu_correctness import render_tpu_correctness  # noqa: E402
from bench.readme_render.tpu_decode_bound import render_tpu_decode_bound  # noqa: E402
from bench.readme_render.tpu_estimate_held_out import render_held_out_setting  # noqa: E402
from bench.readme_render.tpu_grpo import render_tpu_grpo, render_tpu_precision_variants  # noqa: E402
from bench.readme_render.tpu_job import render_tpu_job  # noqa: E402
from bench.readme_render.tpu_update_terms import render_tpu_update_terms  # noqa: E402

RESULTS = REPO / "bench" / "results"
README = REPO / "bench" / "README.md"  # the benchmarks' index, not the repository's front door
# Each group's folder and its README, which holds the group's blocks.
GROUPS = ("chip", "learning", "control_plane", "rollout", "estimate", "pipeline")
PAGES = {group: REPO / "bench" / group / "README.md" for group in GROUPS}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return data


def render_goodput_tiny(result: dict[str, Any]) -> str:
    """The tiny demo job's goodput, as bench/control_plane/eval_panel_screenshot.py --tiny recorded it."""
    goodput = result["goodput"]
    wall, parts = goodput["wall_s"], goodput["parts"]
    shown = sorted(((name, s) for name, s in parts.items() if s >= 0.5), key=lambda item: -item[1])
    listed = ", ".join(f"{name} {s:.1f} s ({s / wall:.0%})" for name, s in shown)
    machine = result.get("machine") or {}
    where = (
        (f" on {machine['cpu_count']} CPU cores (load {machine['load_average'][0]:.2f} at the start), commit `{machine['commit']}`")
        if machine
        else ""
    )
    return (
        f"The tiny demo job (`{result['spec']}`, job `{result['job_id']}`{where}, `bench/results/goodput-bar.json`): "
        f"{duration(wall)} of wall time, {goodput['productive_fraction']:.1%} productive; {listed}. Its job page's "
        "bar is `bench/results/goodput-bar.png`."
    )


# name -> (result files, renderer of their contents in that order, the group whose README holds the block)
SECTIONS: dict[str, tuple[tuple[str, ...], Callable[..., str], str]] = {
    "goodput-tiny": (("goodput-bar.json",), render_goodput_tiny, "control_plane"),
    "arith-difficulty": (("arith_difficulty.json",), learning_benches.render_arith_difficulty, "learning"),
    "learning-folds": (("learning_folds.json",), render_learning_folds, "learning"),
    "learning-folds-eval-check": (("learning_folds_eval_check.json",), render_learning_folds_eval_check, "learning"),
    "events-upload": (("events_upload.json",), storage_benches.render_events_upload, "pipeline"),
    "schemathesis": (("schemathesis.json",), service_benches.render_schemathesis, "control_plane"),
    "kill-loop": (("kill_loop.json",), service_benches.render_kill_loop, "control_plane"),
    "fit-calibration": (("fit_calibration.json",), storage_benches.render_fit_calibration, "estimate"),
    "sse-fanout": (("sse_fanout.json",), service_benches.render_sse_fanout, "control_plane"),
    "replicas": (("replicas.json",), service_benches.render_replicas, "control_plane"),
    "idle-cpu": (("idle_cpu-4d5c520.json", "idle_cpu.json"), service_benches.render_idle_cpu, "control_plane"),
    "upload": (("upload.json",), storage_benches.render_upload, "pipeline"),
    "run-size": (("run_size.json",), storage_benches.render_run_size, "pipeline"),
    "control-plane": (
        ("control_plane.json", "control_plane-5ebe387.json"),
        read_path_benches.render_control_plane_runs,
        "control_plane",
    ),
    "status-read": (("status_read.json",), render_status_read, "control_plane"),
    "status-read-running": (("status_read_running.json",), render_status_read_running, "control_plane"),
    "trainer-overhead": (("trainer_overhead.json",), read_path_benches.render_trainer_overhead, "pipeline"),
    "estimate-accuracy": (("estimate_accuracy.json",), render_estimate_accuracy, "estimate"),
    "tpu-estimate-held-out-setting": (("tpu_estimate_held_out_setting.json",), render_held_out_setting, "estimate"),
    "reward-sandbox-runtimes": (("reward_sandbox_runtimes.json",), render_sandbox_runtimes, "pipeline"),
    "reward-container-cost": (("reward_container_cost.json",), render_reward_container_cost, "pipeline"),
    "tpu-grpo": (("tpu_grpo.json",), render_tpu_grpo, "chip"),
    "tpu-precision-variants": (("tpu_grpo_precision_variants.json",), render_tpu_precision_variants, "chip"),
    "tpu-update-terms": (("tpu_grpo.json", "tpu_grpo_offloaded.json"), render_tpu_update_terms, "chip"),
    "tpu-job": (("tpu_job.json",), render_tpu_job, "chip"),
    "tpu-job-gsm8k": (("tpu_job_gsm8k.json",), render_tpu_job, "chip"),
    "tpu-compile-cache": (("tpu_compile_cache.json",), render_tpu_compile_cache, "chip"),
    "tpu-agreement": (("tpu_agreement.json",), render_tpu_agreement, "chip"),
    "tpu-decode-bound": (("tpu_decode_bound.json",), render_tpu_decode_bound, "chip"),
    "tpu-correctness": (("tpu_correctness.json",), render_tpu_correctness, "chip"),
    "loss-agg-explore": (("loss_agg_explore.json",), render_loss_agg_explore, "learning"),
    "learning-seeds": (("learning_seeds.json",), render_learning_seeds, "learning"),
    "learning-shared-stream": (("learning_shared_stream.json", "learning_seeds.json"), render_learning_shared_stream, "learning"),
}


def page(name: str) -> Path:
    """The README that holds the block `name`: its group's."""
    return PAGES[SECTIONS[name][2]]


def sections_of(group: str) -> list[str]:
    """The blocks the group's README holds, in SECTIONS' order."""
    return [name for name, (_, _, held_by) in SECTIONS.items() if held_by == group]


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def rendered(name: str) -> str:
    files, render, _ = SECTIONS[name]
    return render(*(load(f) for f in files))


def _block(readme: str, name: str) -> tuple[int, int, str] | None:
    """(start of the block's first line, start of the end marker's line, the begin marker's indentation)."""
    begin, end = _markers(name)
    at, stop = readme.find(begin + "\n"), readme.find(end)
    if at < 0 or stop < at:
        return None
    line_start = readme.rfind("\n", 0, at) + 1
    return at + len(begin) + 1, readme.rfind("\n", 0, stop) + 1, readme[line_start:at]


def _indent(text: str, indent: str) -> str:
    return "\n".join(indent + line if line else line for line in text.split("\n"))


def current(readme: str, name: str) -> str | None:
    """The block's text without its indentation (as its renderer writes it)."""
    block = _block(readme, name)
    if block is None:
        return None
    start, stop, indent = block
    if stop <= start:
        return ""
    return "\n".join(line.removeprefix(indent) for line in readme[start:stop].removesuffix("\n").split("\n"))


def replace(readme: str, name: str, text: str) -> str:
    block = _block(readme, name)
    if block is None:
        begin, end = _markers(name)
        raise SystemExit(f"{page(name).relative_to(REPO) if name in SECTIONS else 'the page'} has no {begin} ... {end} block")
    start, stop, indent = block
    return readme[:start] + _indent(text, indent) + "\n" + readme[stop:]


def render_page(group: str, readme: str) -> str:
    """The group's README with each of its blocks rendered from its files (a block whose files are missing kept)."""
    for name in sections_of(group):
        if all((RESULTS / f).exists() for f in SECTIONS[name][0]):
            readme = replace(readme, name, rendered(name))
    return readme


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a section differs from its files")
    args = parser.parse_args()
    readmes = {group: path.read_text() for group, path in PAGES.items()}
    missing = [name for name, (files, _, _) in SECTIONS.items() if not all((RESULTS / f).exists() for f in files)]
    for name in missing:
        absent = [f for f in SECTIONS[name][0] if not (RESULTS / f).exists()]
        print(f"bench:{name}: no bench/results/{', '.join(absent)}; section left as it is", file=sys.stderr)
    stale = [name for name in SECTIONS if name not in missing and current(readmes[SECTIONS[name][2]], name) != rendered(name)]
    if args.check:
        for name in stale:
            print(
                f"{page(name).relative_to(REPO)}'s bench:{name} section differs from {', '.join(SECTIONS[name][0])}",
                file=sys.stderr,
            )
        return 1 if stale or missing else 0
    for group, readme in readmes.items():
        wanted = render_page(group, readme)
        if wanted != readme:
            PAGES[group].write_text(wanted)
    print(f"rendered {len(SECTIONS) - len(missing)} section(s) in {len(PAGES)} group README(s); {len(stale)} changed")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
