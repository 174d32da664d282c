"""The launcher's view of workloads that the emulated controllers really run (harness/podrun), instead of
statuses written by hand: the Job controller's conditions, the kubelet's pod statuses and events, the
pod log endpoint. The trainer container runs a tiny fake command; the rest is the rendered manifest."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from harness.podrun.cluster import EmulatedCluster
from harness.podrun.controllers.scheduling import Node
from harness.podrun.manifests import NS, service_accounts, shared_dir, spec, workload
from service.domain.records.ports import ObservedState

from .conftest import JOB_ID

pytestmark = pytest.mark.timeout(90)


async def _start(cluster, tmp_path, command: list[str], nodes: list[Node] | None = None, **overrides) -> EmulatedCluster:
    emu = EmulatedCluster(cluster.server, tmp_path / "node", nodes=nodes, install_defaults=False)
    await emu.__aenter__()
    for obj in [*service_accounts(), *workload(JOB_ID, command, **overrides)]:
        await emu.create(obj)
    return emu


async def _until(check, *, timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.05)


def _py(code: str, *args: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code), *args]


async def test_pending_running_succeeded_and_the_logs(cluster, make_launcher, recorder, tmp_path):
    launcher = make_launcher()
    launcher.start(recorder)
    emu = await _start(cluster, tmp_path, _py("import time; print('step 1', flush=True); time.sleep(1.5); print('done')"))
    try:
        running = await recorder.wait_for(ObservedState.RUNNING)
        assert running.object_name == f"job/{JOB_ID}" and JOB_ID in running.message
        done = await recorder.wait_for(ObservedState.SUCCEEDED)
        assert done.exit_code == 0
        states = [o.state for o in recorder.seen]
        assert set(states) <= {ObservedState.PENDING, ObservedState.RUNNING, ObservedState.SUCCEEDED}, states
        lines = await asyncio.to_thread(lambda: list(launcher.logs(JOB_ID, follow=True)))
        assert [line for line in lines if line is not None] == ["step 1", "done"]
    finally:
        await asyncio.to_thread(launcher.stop)
        await emu.__aexit__(None, None, None)


async def test_a_non_retryable_exit_is_failed_with_its_exit_code(cluster, make_launcher, recorder, tmp_path):
    launcher = make_launcher()
    launcher.start(recorder)
    emu = await _start(cluster, tmp_path, _py("import sys; print('bad spec', file=sys.stderr); sys.exit(65)"))
    try:
        failed = await recorder.wait_for(ObservedState.FAILED)
        assert (failed.reason, failed.exit_code) == ("PodFailurePolicy", 65)
        assert "not retried" in failed.message
        assert ObservedState.RESTARTING not in [o.state for o in recorder.seen]
    finally:
        await asyncio.to_thread(launcher.stop)
        await emu.__aexit__(None, None, None)


SLOW_TO_STOP = """
    import os, signal, sys, time
    marker = os.path.join(sys.argv[1], 'started')
    if os.path.exists(marker):
        sys.exit(0)
    def stop(*_):
        time.sleep(1.5); sys.exit(143)  # a checkpoint being saved
    signal.signal(signal.SIGTERM, stop)
    open(marker, 'w').write('1')  # after the handler: the test evicts only once the marker is there
    time.sleep(60)
"""


async def test_an_eviction_is_restarting_not_failed(cluster, make_launcher, recorder, tmp_path):
    shared = shared_dir(tmp_path)
    launcher = make_launcher()
    launcher.start(recorder)
    emu = await _start(
        cluster, tmp_path, _py(SLOW_TO_STOP, str(shared)), host_paths=[str(shared)], job_spec=spec(output=str(shared / "runs"))
    )
    try:
        running = await recorder.wait_for(ObservedState.RUNNING)
        pod = running.message.split("(")[1].rstrip(")")
        # RUNNING is the container's state, not the program's: evicted before it wrote the marker, the first
        # run would die without one and the replacement would sleep instead of finishing.
        await _until(lambda: (shared / "started").exists(), timeout_s=30)
        await emu.evict("rljob", pod, reason="TerminationByKubelet", message="Spot VM preempted")
        restarting = await recorder.wait_for(ObservedState.RESTARTING)
        assert restarting.reason == "TerminationByKubelet"
        await recorder.wait_for(ObservedState.SUCCEEDED, timeout_s=30)
        assert ObservedState.FAILED not in [o.state for o in recorder.seen]
    finally:
        await asyncio.to_thread(launcher.stop)
        await emu.__aexit__(None, None, None)


# One GKE node per single-host TPU VM shape, labelled, tainted and sized as GKE does (Node.gke_tpu), stated here from
# Google's tables rather than read from the accelerator table under test: accelerator -> (machine type, topology, chips).
TPU_VMS = {
    "v6e-8": ("ct6e-standard-8t", "2x4", 8),
    "v5e-1": ("ct5lp-hightpu-1t", "1x1", 1),
    "v5e-4": ("ct5lp-hightpu-4t", "2x2", 4),
    "v5e-8": ("ct5lp-hightpu-8t", "2x4", 8),
    "tpu7x-8": ("tpu7x-standard-4t", "2x2x1", 4),
}


@pytest.mark.parametrize("accelerator", sorted(TPU_VMS))
async def test_a_single_host_tpu_job_runs_on_a_vm_of_its_own_shape(accelerator, cluster, make_launcher, recorder, tmp_path):
    """Beside TPU VMs of other shapes, the rendered pod's selectors (accelerator, topology, machine type) bind it to a
    VM of its own shape, and its CPU, memory and chip requests fit within that VM's allocatable; it runs to the end."""
    nodes = [Node.gke_tpu(f"tpu-{name}", topology=topology, machine_type=vm, chips=n) for name, (vm, topology, n) in TPU_VMS.items()]
    launcher = make_launcher()
    launcher.start(recorder)
    emu = await _start(cluster, tmp_path, _py("print('on a TPU VM')"), nodes=nodes, job_spec=spec(accelerator, TPU_VMS[accelerator][2]))
    try:
        running = await recorder.wait_for(ObservedState.RUNNING)
        (pod,) = emu.pods(NS, **{"job-name": JOB_ID})
        assert pod["spec"]["nodeName"] == f"tpu-{accelerator}", running.message
        done = await recorder.wait_for(ObservedState.SUCCEEDED)
        assert done.exit_code == 0
    finally:
        await asyncio.to_thread(launcher.stop)
        await emu.__aexit__(None, None, None)


async def test_a_multi_host_tpu7x_job_runs_on_the_two_vms_of_its_2x2x2_pool(cluster, make_launcher, recorder, tmp_path):
    """tpu7x-16 is one JobSet over the two tpu7x-standard-4t VMs of a 2x2x2 pool (GKE labels a workload-policy pool's
    nodes with the topology as it does a --tpu-topology one: xpk's Kueue flavor for tpu7x-16 selects on it), not on
    the single-host TPU7x VM or the 4-chip VMs of another generation beside them; both workers run to the end."""
    pool = [Node.gke_tpu(f"tpu7x-16-{i}", pool="tpu7x-16", topology="2x2x2", machine_type="tpu7x-standard-4t") for i in range(2)]
    decoys = [
        Node.gke_tpu("tpu7x-8-0", pool="tpu7x-8", topology="2x2x1", machine_type="tpu7x-standard-4t"),
        *(Node.gke_tpu(f"v6e-16-{i}", pool="v6e-16", topology="4x4", machine_type="ct6e-standard-4t") for i in range(2)),
    ]
    launcher = make_launcher()
    launcher.start(recorder)
    emu = await _start(cluster, tmp_path, _py("print('on a TPU7x VM')"), nodes=[*decoys, *pool], job_spec=spec("tpu7x-16", 4))
    try:
        running = await recorder.wait_for(ObservedState.RUNNING)
        assert running.object_name == f"jobset/{JOB_ID}", running.message
        done = await recorder.wait_for(ObservedState.SUCCEEDED)
        assert done.exit_code == 0
        pods = emu.pods(NS, **{"jobset.sigs.k8s.io/jobset-name": JOB_ID})
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["tpu7x-16-0", "tpu7x-16-1"]
    finally:
        await asyncio.to_thread(launcher.stop)
        await emu.__aexit__(None, None, None)
