"""The phase machine: exhaustive table, every illegal move refused, sets consistent with the table."""

from __future__ import annotations

import itertools

import pytest

from service.domain.records.errors import IllegalTransition
from service.domain.records.phases import ALLOWED_TRANSITIONS, CANCELLABLE, TERMINAL, JobPhase, can_transition, transition

# The intended machine, written out independently of the implementation's table.
EXPECTED = {
    ("QUEUED", "LAUNCHING"),
    ("QUEUED", "CANCELLED"),
    # Held by a backend's queue (Kueue, a team quota): admitted straight to running, or ended while queued.
    ("QUEUED", "RUNNING"),
    ("QUEUED", "SUCCEEDED"),
    ("QUEUED", "FAILED"),
    ("QUEUED", "CANCELLING"),
    ("LAUNCHING", "QUEUED"),
    ("RUNNING", "QUEUED"),  # not admitted yet; preempted
    ("LAUNCHING", "RUNNING"),
    ("LAUNCHING", "SUCCEEDED"),
    ("LAUNCHING", "FAILED"),
    ("LAUNCHING", "CANCELLING"),
    ("RUNNING", "SUCCEEDED"),
    ("RUNNING", "FAILED"),
    ("RUNNING", "CANCELLING"),
    ("RUNNING", "LAUNCHING"),
    ("CANCELLING", "CANCELLED"),
}


def test_table_is_exhaustive_over_the_enum() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(JobPhase)
    for targets in ALLOWED_TRANSITIONS.values():
        assert targets <= set(JobPhase)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(JobPhase, JobPhase)))
def test_every_pair_is_allowed_exactly_when_expected(current: JobPhase, target: JobPhase) -> None:
    legal = (current.value, target.value) in EXPECTED
    assert can_transition(current, target) is legal
    if legal:
        assert transition(current, target) is target
    else:
        with pytest.raises(IllegalTransition) as exc:
            transition(current, target)
        assert current.value in str(exc.value) and target.value in str(exc.value)


def test_terminal_phases_have_no_way_out_and_are_reachable() -> None:
    assert TERMINAL == {JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED}
    for phase in JobPhase:
        assert phase.is_terminal() is (phase in TERMINAL)
        if phase in TERMINAL:
            assert ALLOWED_TRANSITIONS[phase] == frozenset()
            assert any(phase in targets for targets in ALLOWED_TRANSITIONS.values())


def test_cancellable_phases_can_start_a_cancel() -> None:
    assert CANCELLABLE == {JobPhase.QUEUED, JobPhase.LAUNCHING, JobPhase.RUNNING}
    for phase in CANCELLABLE:
        assert can_transition(phase, JobPhase.CANCELLING) or can_transition(phase, JobPhase.CANCELLED)
    assert not CANCELLABLE & TERMINAL


def test_can_reach_follows_chains_of_legal_transitions_only() -> None:
    from service.domain.records.phases import can_reach

    assert can_reach(JobPhase.QUEUED, JobPhase.SUCCEEDED)  # through LAUNCHING and RUNNING
    assert can_reach(JobPhase.RUNNING, JobPhase.QUEUED)  # preempted back into the queue
    assert not can_reach(JobPhase.SUCCEEDED, JobPhase.RUNNING)  # nothing leaves a terminal phase
    assert not can_reach(JobPhase.CANCELLING, JobPhase.RUNNING)
