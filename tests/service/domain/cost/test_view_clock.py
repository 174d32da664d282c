"""The public view reads a job's clock once (issue 54 §4): usage, goodput and the estimate's actuals all come
from that one reading, so they agree and a status read does not repeat the work."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from service.domain.cost import job_clock
from service.domain.cost.estimate_actuals import estimate_actuals
from service.domain.cost.estimates import estimate_job
from service.domain.cost.usage import DEFAULT_PRICES_USD_PER_CHIP_HOUR, job_usage
from service.domain.records.models import JobRecord
from service.domain.records.phases import JobPhase
from service.domain.views import to_public
from tests.service.domain.cost.test_estimates import NOW, _finished, _inputs, _spec


def _count_clock_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Each call of job_clock's phase_seconds and stage_seconds, wherever a module imported them by name."""
    reads: Counter[str] = Counter()
    for name in ("phase_seconds", "stage_seconds"):
        original = getattr(job_clock, name)

        def spy(*args: Any, _name: str = name, _original: Callable[..., Any] = original) -> Any:
            reads[_name] += 1
            return _original(*args)

        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("service.") and getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, spy)
    return reads


def _ended_with_estimate() -> JobRecord:
    spec = _spec()
    history = [_finished("rl-same00000001", spec, 1000.0), _finished("rl-same00000002", spec, 1300.0, storage=10_000)]
    record = _finished("rl-thisjob00001", spec, 1100.0, storage=12_000)
    record.estimate = estimate_job(_inputs(spec, finished=history, recent=history))
    return record


@pytest.mark.parametrize("phase", [JobPhase.SUCCEEDED, JobPhase.RUNNING])
def test_the_view_reads_the_job_clock_once(monkeypatch: pytest.MonkeyPatch, phase: JobPhase) -> None:
    record = _ended_with_estimate()
    if phase is JobPhase.RUNNING:
        record.phase, record.finished_at, record.phase_entered_at = phase, None, NOW - timedelta(seconds=60)
    reads = _count_clock_reads(monkeypatch)
    public = to_public(record, NOW)
    assert public.usage is not None and public.goodput is not None
    assert (public.estimate_actuals is not None) == (phase is JobPhase.SUCCEEDED)
    assert reads == {"phase_seconds": 1, "stage_seconds": 1}


def test_the_views_one_reading_gives_the_same_figures_as_reading_each_on_its_own() -> None:
    record = _ended_with_estimate()
    public = to_public(record, NOW)
    assert public.usage == job_usage(record, NOW, DEFAULT_PRICES_USD_PER_CHIP_HOUR)
    assert public.estimate_actuals == estimate_actuals(record, DEFAULT_PRICES_USD_PER_CHIP_HOUR)
    assert public.estimate_actuals is not None and public.estimate_actuals.wall_s.actual == pytest.approx(1105.0)
