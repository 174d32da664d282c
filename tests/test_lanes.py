"""The slow lanes hold: each lane runs whole in one worker, the two lanes in two workers, every test once.

Drives tests/lanes.py's scheduler the way pytest-xdist's DSession does (two workers report the same
collection, the scheduler sends them tests, each worker reports every test it finished), on node ids of the
real lane files mixed with other tests in the order tests/conftest.py gives them. xdist's own `loadgroup`
split lanes silently under pytest 9.2 (tests/lanes.py says why); a scheduler that splits a lane fails here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.lanes import LANE_ORDER, SLOW_LANES, LaneScheduling, lane_of


@dataclass(eq=False)
class FakeWorker:
    """What the scheduler uses of xdist's WorkerController: a gateway id, sent indices, shutdown."""

    name: str
    gateway: SimpleNamespace = field(init=False)
    queue: list[int] = field(default_factory=list)
    shutting_down: bool = False

    def __post_init__(self) -> None:
        self.gateway = SimpleNamespace(id=self.name)

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


@dataclass
class FakeItem:
    nodeid: str
    slow: bool

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None


def collection() -> list[str]:
    """Two tests of every lane file between tests outside the lanes, ordered as tests/conftest.py orders them."""
    items = [FakeItem(f"tests/a/test_fast_{i}.py::test_{i}", slow=False) for i in range(30)]
    for n, path in enumerate(SLOW_LANES):
        items[3 * n + 1 : 3 * n + 1] = [FakeItem(f"{path}::test_one", True), FakeItem(f"{path}::test_two[x-1]", True)]
    conftest.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    return [item.nodeid for item in items]


def run_schedule(ids: list[str], *, finish_order: list[int]) -> dict[str, str]:
    """Which worker ran each test, the workers finishing tests in turn as `finish_order` (worker indices) says."""
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"] if name == "tx" else None, option=SimpleNamespace(loadscopereorder=True))
    scheduler = LaneScheduling(config)  # type: ignore[arg-type]
    workers = [FakeWorker("gw0"), FakeWorker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)  # type: ignore[arg-type]
        scheduler.add_node_collection(worker, ids)  # type: ignore[arg-type]
    scheduler.schedule()
    ran: dict[str, str] = {}
    turn = 0
    # A worker runs what it was sent, also after it is told to shut down (xdist's last test runs then).
    while any(worker.queue for worker in workers):
        worker = workers[finish_order[turn % len(finish_order)]]
        turn += 1
        if not worker.queue:
            continue
        index = worker.queue.pop(0)
        assert ids[index] not in ran, f"{ids[index]} ran twice"
        ran[ids[index]] = worker.name
        scheduler.mark_test_complete(worker, index)  # type: ignore[arg-type]
    assert not scheduler.has_pending
    return ran


def test_the_lanes_come_first_each_running_its_files_in_the_order_the_table_gives() -> None:
    ids = collection()
    lanes = [lane_of(nodeid) for nodeid in ids]
    first_other = lanes.index(None)
    assert all(lane is not None for lane in lanes[:first_other]) and not any(lanes[first_other:])
    assert [LANE_ORDER[lane] for lane in lanes[:first_other]] == sorted(LANE_ORDER[lane] for lane in lanes[:first_other])
    lane_paths = [nodeid.split("::")[0] for nodeid in ids[:first_other]]
    assert list(dict.fromkeys(lane_paths)) == sorted(
        SLOW_LANES, key=lambda path: (LANE_ORDER[SLOW_LANES[path]], list(SLOW_LANES).index(path))
    )


@pytest.mark.parametrize("finish_order", [[0, 1], [0, 0, 0, 1], [1, 1, 1, 1, 1, 0]], ids=["even", "gw0-fast", "gw1-fast"])
def test_each_lane_runs_whole_in_one_worker_and_the_two_lanes_in_two(finish_order: list[int]) -> None:
    ids = collection()
    ran = run_schedule(ids, finish_order=finish_order)
    assert sorted(ran) == sorted(ids)  # every test, once
    workers_of = {lane: {ran[nodeid] for nodeid in ids if lane_of(nodeid) == lane} for lane in LANE_ORDER}
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of
    assert {next(iter(workers)) for workers in workers_of.values()} == {"gw0", "gw1"}, workers_of


def test_the_other_tests_go_to_whichever_worker_is_free() -> None:
    ids = collection()
    even = run_schedule(ids, finish_order=[0, 1])
    assert {even[nodeid] for nodeid in ids if lane_of(nodeid) is None} == {"gw0", "gw1"}
    # gw1 five times as fast: it ends its lane first and takes the other tests while gw0 is still in its lane.
    uneven = run_schedule(ids, finish_order=[1, 1, 1, 1, 1, 0])
    gw1_lane = next(lane for lane in LANE_ORDER if {uneven[n] for n in ids if lane_of(n) == lane} == {"gw1"})
    others_on_gw1 = [n for n in ids if lane_of(n) is None and uneven[n] == "gw1"]
    assert len(others_on_gw1) > len([n for n in ids if lane_of(n) is None]) / 2, (gw1_lane, others_on_gw1)


def test_a_slow_test_outside_every_lane_stops_the_run() -> None:
    items = [FakeItem("tests/trainer/test_slow_new.py::test_it", slow=True)]
    with pytest.raises(pytest.UsageError, match=r"tests/trainer/test_slow_new\.py.*SLOW_LANES"):
        conftest.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
