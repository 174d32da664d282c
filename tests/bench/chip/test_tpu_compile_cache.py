"""bench/chip/tpu_compile_cache.py: the committed result is what its committed inputs (the jobs' trainer events and
the call record) give through the service's own fold and warmup split."""

from __future__ import annotations

import json
from pathlib import Path

from bench.chip import tpu_compile_cache

RESULTS = Path(tpu_compile_cache.__file__).resolve().parents[1] / "results"


def test_the_committed_result_is_what_its_events_give():
    committed = json.loads(tpu_compile_cache.RESULT.read_text())
    machines = committed["machines"]
    again = tpu_compile_cache.measure_machines(
        (tpu_compile_cache.REPO / machines[0]["events"]).resolve(),
        [(tpu_compile_cache.REPO / m["record"]).resolve() for m in machines],
    )
    assert again == committed


def test_the_job_that_converted_is_the_one_that_found_the_cache_new():
    committed = json.loads(tpu_compile_cache.RESULT.read_text())
    assert len(committed["machines"]) >= 2
    for machine in committed["machines"]:
        by_cache = {job["cache"]: job for job in machine["jobs"].values()}
        assert by_cache["new"]["convert"]["skipped"] is False and by_cache["filled"]["convert"]["skipped"] is True
        assert by_cache["filled"]["warmup_s"] < by_cache["new"]["warmup_s"]
