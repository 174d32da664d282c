"""The control-plane and trainer-overhead README entries state each target as met or by how much it was missed,
from the result file alone: a shed request, a slow p99 or one run over the ratio turns a verdict."""

from __future__ import annotations

import copy
from typing import Any

from bench.readme_render.read_path_benches import GET, LIST, render_control_plane, render_trainer_overhead


def _row(rate: int, cpu: float, p99: float = 5.0, shed: int = 0) -> dict[str, Any]:
    sent = rate * 10
    return {
        "offered_rps": rate,
        "sent": sent,
        "ok": sent - shed,
        "shed": shed,
        "timeouts": 0,
        "errors": 0,
        "p50_ms": 1.0,
        "p90_ms": 2.0,
        "p99_ms": p99,
        "max_ms": p99,
        "cpu_ms_per_request": cpu,
    }


def _server(get_cpu: float, list_cpu: float) -> dict[str, Any]:
    gets = [_row(rate, get_cpu) for rate in (100, 250, 400, 500)]
    return {"idle_cpu_percent": 0.5, GET: gets, LIST: [_row(rate, list_cpu) for rate in (25, 50, 100)]}


RESULT = {
    "duration_s": 10.0,
    "jobs": 1000,
    "before": None,
    "servers": {"rljob serve": _server(1.2, 4.0), "minimal": _server(1.0, 2.0)},
    "machine": {"cpu_count": 2, "load_average": [1.0, 1.0, 1.0], "commit": "abc", "command": "python bench/control_plane/control_plane.py"},
}


def test_targets_met_say_so_with_the_worst_ratio() -> None:
    text = render_control_plane(RESULT)
    assert "status read CPU <= 2x the minimal app's: met (at most 1.20x)" in text
    assert "500 req/s served at p99 <= 10 ms: met" in text and "list <= 3x: met (at most 2.00x)" in text


def test_a_shed_request_below_the_rate_and_a_slow_p99_are_misses_with_their_size() -> None:
    result = copy.deepcopy(RESULT)
    gets = result["servers"]["rljob serve"][GET]
    gets[2] = _row(400, 1.2, shed=7)
    gets[3] = _row(500, 3.0, p99=25.0)
    text = render_control_plane(result)
    assert "nothing shed below that rate: **not met** (7 not served)" in text
    assert "**not met** (5,000/5,000, p99 25.0 ms, 2.50 times the p99 target)" in text
    assert "status read CPU <= 2x the minimal app's: **not met** (up to 3.00x, 1.50 times the target)" in text


def test_the_trainer_overhead_needs_three_runs_under_the_ratio() -> None:
    machine = {
        "cpu_count": 2,
        "load_average": [1.0, 1.0, 1.0],
        "load_average_at_end": [2.0, 1.0, 1.0],
        "commit": "abc",
        "command": "python bench/pipeline/trainer_overhead.py",
    }
    run = {"machine": machine, "bare_s": {"convert": 1.0, "total": 100.0}, "trainer_s": {"convert": 1.0, "total": 104.0}, "ratio": 1.04}
    result = {"target_ratio": 1.05, "runs": [run, run, run]}
    assert "Target <= 1.05 in 3 of 3 runs: met (median 1.040; worst 1.040)" in render_trainer_overhead(result)
    result["runs"] = [run, run, {**run, "ratio": 1.07}]
    assert "**not met**: 2 of 3 (median 1.040; worst 1.070)" in render_trainer_overhead(result)
    result["runs"] = [run, run]
    assert "**not met**: 2 of 2" in render_trainer_overhead(result)
