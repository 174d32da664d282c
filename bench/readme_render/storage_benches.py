"""README passages of the storage and trainer-memory benches: events upload, export upload, fit calibration."""

from __future__ import annotations

from typing import Any

from bench.readme_render.common import count, load_span, ratio, where, where_shared

GIB = 2**30
# What the fit estimate counts per parameter beside activations (trainer/sizing/fit.py's parts that grow with the
# parameters): weights, two AdamW moments, gradients, reference.
PARAMETER_PARTS = ("params", "optimizer", "gradients", "reference")


def render_events_upload(result: dict[str, Any]) -> str:
    rewrite, append = result["rewrite"], result["append"]
    return (
        f"Last run (`bench/results/events_upload.json`, {count(result['events'])} events of {result['event_bytes']} "
        f"bytes; {where(result.get('machine'))}): rewriting {rewrite['first_tenth_ms']} -> {rewrite['last_tenth_ms']} "
        f"ms/event from the first to the last tenth, appending per {result['batch']} events {append['first_tenth_ms']} "
        f"-> {append['last_tenth_ms']} ms/event (the emulator copies data on compose; real GCS composes without "
        f"copying), {ratio(rewrite['last_tenth_ms'], append['last_tenth_ms'])} at the end."
    )


def render_upload(result: dict[str, Any]) -> str:
    runs = sorted(result.values(), key=lambda entry: entry["latency_ms"])
    first = runs[0]

    def run(entry: dict[str, Any]) -> str:
        latency = f"`--latency-ms {entry['latency_ms']:g}`" if entry["latency_ms"] else "no added latency"
        details = [
            f"{entry['loop_s']:.2f} s per-file loop",
            f"{entry['upload_dir_s']:.2f} s upload_dir with {entry['workers']} threads",
            load_span(entry.get("machine")),
        ]
        return f"{entry['ratio']}x with {latency} ({', '.join(filter(None, details))})"

    return (
        f"Last runs (`bench/results/upload.json`, {first['files']} files, {first['bytes'] / 2**20:.1f} MiB; "
        f"{where_shared([entry.get('machine') for entry in runs])}): " + ", ".join(run(entry) for entry in runs) + "."
    )


def render_fit_calibration(result: dict[str, Any]) -> str:
    tiny, wide = result["runs"]
    growth_measured = wide["measured_peak_rss_bytes"] - tiny["measured_peak_rss_bytes"]
    growth_estimated = wide["estimated_bytes"] - tiny["estimated_bytes"]
    added_parameter_bytes = wide["per_chip"]["params"] - tiny["per_chip"]["params"]
    counted = sum(wide["per_chip"][p] - tiny["per_chip"][p] for p in PARAMETER_PARTS) / added_parameter_bytes

    def run(entry: dict[str, Any]) -> str:
        return (
            f"{entry['model']} ({entry['parameters'] / 1e6:.1f} M parameters) estimated "
            f"{entry['estimated_bytes'] / GIB:.2f} GiB, measured {entry['measured_peak_rss_bytes'] / GIB:.2f} GiB"
        )

    return (
        f"Last run (`bench/results/fit_calibration.json`, {where(result.get('machine'))}): {run(tiny)}; {run(wide)}; "
        f"growth measured {growth_measured / GIB:.2f} GiB vs estimated {growth_estimated / GIB:.2f} GiB, **ratio "
        f"{result['growth_ratio_measured_over_estimated']:.2f}**: the added parameters cost about "
        f"{growth_measured / added_parameter_bytes:.1f} copies of themselves where the estimate counts {counted:g} "
        "(weights, two AdamW moments, gradients, reference)."
    )


def render_run_size(result: dict[str, Any]) -> str:
    """A real run directory's size with the default retention (bench/pipeline/run_size.py)."""
    last = result["storage_events"][-1]
    parts = sorted(((name, size) for name, size in last["parts"].items() if size >= 2**20), key=lambda item: -item[1])
    listed = ", ".join(f"{name} {size / GIB:.2f} GiB" for name, size in parts)
    total = result["du_bytes"] / GIB
    verdict = "met" if total <= result["target_gib"] else f"missed by {total - result['target_gib']:.2f} GiB"
    baseline = result["baseline"]
    return (
        f"Last run (`bench/results/run_size.json`, {where(result.get('machine'))}): {result['model']}, "
        f"{result['steps']} GRPO steps through `trainer run`, a checkpoint every {result['checkpoint_period']} steps, "
        f"`keep_last_checkpoints` at its default: {total:.2f} GiB on disk, checkpoint step(s) kept "
        f"{', '.join(map(str, result['checkpoint_steps_kept']))}; the trainer's last measurement: {listed} (the converted "
        f"checkpoint is in the conversion cache, outside the run directory). Target "
        f"<= {result['target_gib']} GiB: {verdict} (the same run with rl.yml's retention kept {baseline['checkpoints_kept']} "
        f"checkpoints, {baseline['gib']} GiB; issue 21). Wall time {result['wall_s'] / 60:.1f} min."
    )
