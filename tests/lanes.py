"""The slow tests' two lanes, and the pytest-xdist scheduler that keeps each lane in one worker.

scripts/test.sh runs pytest on two pytest-xdist workers. The slow tests (MaxText on CPU, minutes each) are
split into two lanes: each lane runs whole, in collection order, in one worker process, and the lanes come
first (tests/conftest.py sorts them to the front), so each worker starts with one lane; the fast tests are
single units any free worker takes. A lane shares what its worker builds once (the tiny model, the
conversion cache of its shared output: tests/conftest.py) and the runs its modules' fixtures keep, and
which slow tests share a process never depends on timing.

Why a scheduler of our own: xdist's `--dist loadgroup` marks a group by appending `@group` to each test's
`item._nodeid`, which pytest 9.2 no longer reads (a node's id is `_id`), so groups were silently ignored
and one lane's tests ran on both workers, each building its own fixtures. Here the lane is read from the
test's file in the node id, which needs nothing of the item.

The lanes are balanced by the durations scripts/test.sh prints (docs/testing.md has the figures). A new
slow test file must be given a lane here; a run with a slow test outside every lane stops and says so.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

# Each lane runs its files in this order.
SLOW_LANES: dict[str, str] = {
    # The service's paths with the real trainer (local launcher, emulated cluster, GCS) and SmolLM2. The local
    # tiny job first: it converts the tiny model for the lane's shared output, so the emulated cluster's pods
    # take the cached checkpoint.
    "tests/service/test_tiny_job_integration.py": "slow-lane-1",
    "tests/service/domain/evals/test_attached_evals_tiny.py": "slow-lane-1",  # eval jobs attached to a tiny job (issue 36)
    "tests/service/domain/cost/test_estimate_tiny.py": "slow-lane-1",  # three one-step tiny jobs: the estimate vs the actual (issue 37)
    "tests/k8s/test_e2e_tiny_cpu.py": "slow-lane-1",
    "tests/storage/test_pipeline_gcs.py": "slow-lane-1",
    "tests/trainer/offline/test_slow_smollm2.py": "slow-lane-1",
    # The trainer's own runs on the tiny model: one conversion cache (tests/trainer/conftest.py).
    "tests/trainer/checks/test_slow_export_check.py": "slow-lane-2",
    "tests/trainer/test_slow_learning.py": "slow-lane-2",
    "tests/trainer/test_slow_pipeline.py": "slow-lane-2",
    "tests/trainer/test_slow_preemption.py": "slow-lane-2",
    "tests/trainer/rollout/test_slow_shared_prefill.py": "slow-lane-2",
    "tests/trainer/rollout/test_slow_qwen3_rollout.py": "slow-lane-2",  # the rollout engine's Qwen3 vs MaxText's forward (issue 39)
    "tests/trainer/evals/test_eval_slow_tiny.py": "slow-lane-2",  # an eval job on the tiny model (transformers, no MaxText run)
    "tests/trainer/evals/test_jax_eval_engine.py": "slow-lane-2",  # the JAX evaluation engine against transformers (issue 64)
    "tests/service/test_qwen3_tiny_job.py": "slow-lane-2",  # a one-step tiny Qwen3 job through the service (issue 39)
    "tests/test_readme_demo.py": "slow-lane-2",  # the README's first command, scripts/demo.sh, whole (86 s in CI)
}
LANE_ORDER = {name: i for i, name in enumerate(dict.fromkeys(SLOW_LANES.values()))}


def lane_of(nodeid: str) -> str | None:
    """The lane of a test by its node id (`path::name[params]`), or None for a test outside the lanes."""
    return SLOW_LANES.get(nodeid.split("::", 1)[0])


def lane_position(nodeid: str) -> tuple[int, int]:
    """Where a test goes in the run: lanes first, each lane's files in SLOW_LANES' order, then the rest."""
    path = nodeid.split("::", 1)[0]
    lane = SLOW_LANES.get(path)
    if lane is None:
        return len(LANE_ORDER), 0
    return LANE_ORDER[lane], list(SLOW_LANES).index(path)


class LaneScheduling(LoadScopeScheduling):
    """xdist's load-scope scheduling where a scope is a whole lane or one test outside the lanes.

    A scope goes to one worker, whole, when that worker has two tests or fewer left (xdist's rule), so a
    lane's tests run in one process in their order, and every other test runs wherever a worker is free.
    """

    def _split_scope(self, nodeid: str) -> str:
        return lane_of(nodeid) or nodeid
