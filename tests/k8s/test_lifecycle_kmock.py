"""The launcher against kmock with the real kubernetes client; the test plays the Job controller."""

from __future__ import annotations

import asyncio

import pytest

from service.domain.records.ports import ObservedState

from .conftest import JOB_ID, NS, make_spec

pytestmark = pytest.mark.timeout(30)


async def test_launch_pending_running_succeeded(cluster, make_launcher, recorder, spec):
    launcher = make_launcher()
    launcher.start(recorder)
    try:
        result = await asyncio.to_thread(launcher.launch, JOB_ID, spec)
        assert (result.backend, result.object_name) == ("kubernetes", f"job/{JOB_ID}")
        job = cluster.job()
        assert job["spec"]["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x4"
        # The spec ConfigMap is owned by the Job, so TTL/cancel clean it up with the Job.
        cm = cluster.server.objects["v1/configmaps", NS, f"{JOB_ID}-spec"]
        assert cm["metadata"]["ownerReferences"][0]["kind"] == "Job"
        assert '"tutorial-llama31-8b"' in cm["data"]["spec.json"]

        pending = await recorder.wait_for(ObservedState.PENDING)
        assert pending.object_name == f"job/{JOB_ID}"

        pod = await cluster.create_pod()
        await cluster.run_pod(pod)
        running = await recorder.wait_for(ObservedState.RUNNING)
        assert pod in running.message

        await cluster.end_pod(pod, 0, reason="Completed")
        await cluster.set_job_conditions({"type": "SuccessCriteriaMet"}, {"type": "Complete"}, succeeded=1)
        done = await recorder.wait_for(ObservedState.SUCCEEDED)
        assert done.exit_code == 0
        # Only forward steps: pending (maybe several reasons), running, succeeded; never a failure.
        states = [o.state for o in recorder.seen]
        collapsed = [s for i, s in enumerate(states) if i == 0 or states[i - 1] is not s]
        assert collapsed == [ObservedState.PENDING, ObservedState.RUNNING, ObservedState.SUCCEEDED]
        assert len(set(recorder.seen)) == len(recorder.seen)  # pushed only on change
    finally:
        await asyncio.to_thread(launcher.stop)


async def test_unschedulable_reason_is_visible(cluster, make_launcher, recorder, spec):
    launcher = make_launcher()
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    pod = await cluster.create_pod(
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            }
        ]
    )
    await cluster.event(pod, "NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached")
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert obs.state is ObservedState.PENDING
    assert obs.reason == "Unschedulable"
    assert "cloud.google.com/gke-tpu-topology=2x4" in obs.message
    assert "node.kubernetes.io/instance-type=ct6e-standard-8t" in obs.message
    assert "google.com/tpu: 8" in obs.message
    assert "quota" in obs.message and "max node group size reached" in obs.message


async def test_image_pull_error_is_pending_with_reason(cluster, make_launcher, spec):
    launcher = make_launcher()
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    await cluster.create_pod(
        containerStatuses=[
            {
                "name": "trainer",
                "ready": False,
                "restartCount": 0,
                "image": "i",
                "imageID": "",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
            }
        ]
    )
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert (obs.state, obs.reason) == (ObservedState.PENDING, "ImagePullBackOff")
    assert "artifactregistry.reader" in obs.message


async def test_kueue_not_admitted(cluster, make_launcher, spec):
    launcher = make_launcher(kueue_queue="tpu-queue")
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    assert cluster.job()["spec"]["suspend"] is True
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    # No Kueue API in this cluster: still QUEUED in its LocalQueue, the place in line unknown.
    assert (obs.state, obs.reason) == (ObservedState.QUEUED, "KueueNotAdmitted")
    assert obs.queue is not None and (obs.queue.name, obs.queue.position) == ("tpu-queue", None)


async def test_oom_killed_fails_with_reason(cluster, make_launcher, recorder, spec):
    launcher = make_launcher()
    launcher.start(recorder)
    try:
        await asyncio.to_thread(launcher.launch, JOB_ID, spec)
        pod = await cluster.create_pod()
        await cluster.run_pod(pod)
        await recorder.wait_for(ObservedState.RUNNING)
        await cluster.end_pod(pod, 137, reason="OOMKilled")
        await cluster.set_job_conditions(
            {"type": "Failed", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"},
            failed=4,
        )
        failed = await recorder.wait_for(ObservedState.FAILED)
        assert failed.reason == "OOMKilled" and failed.exit_code == 137
        assert "1280Gi" in failed.message and "RLJOB_K8S_MEMORY_REQUEST" in failed.message
    finally:
        await asyncio.to_thread(launcher.stop)


async def test_non_retryable_exit_fails_by_pod_failure_policy(cluster, make_launcher, spec):
    launcher = make_launcher()
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    pod = await cluster.create_pod()
    await cluster.end_pod(pod, 77)
    await cluster.set_job_conditions(
        {
            "type": "Failed",
            "reason": "PodFailurePolicy",
            "message": f"Container trainer for pod {NS}/{pod} failed with exit code 77 matching FailJob rule at index 1",
        },
        failed=1,
    )
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert (obs.state, obs.reason, obs.exit_code) == (ObservedState.FAILED, "PodFailurePolicy", 77)
    assert "bucket" in obs.message  # describe_exit_code(77): check the bucket and the service account


async def test_deadline_exceeded(cluster, make_launcher, spec):
    launcher = make_launcher(active_deadline_s=3600)
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    await cluster.set_job_conditions({"type": "Failed", "reason": "DeadlineExceeded", "message": "Job was active longer"})
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert (obs.state, obs.reason) == (ObservedState.FAILED, "DeadlineExceeded")
    assert "activeDeadlineSeconds=3600" in obs.message


async def test_disruption_restarts_without_failing(cluster, make_launcher, recorder, spec):
    launcher = make_launcher()
    launcher.start(recorder)
    try:
        await asyncio.to_thread(launcher.launch, JOB_ID, spec)
        first = await cluster.create_pod()
        await cluster.run_pod(first)
        await recorder.wait_for(ObservedState.RUNNING)
        # Preempted: the kubelet marks DisruptionTarget; podFailurePolicy ignores it (status.failed stays 0).
        await cluster.end_pod(
            first,
            143,
            conditions=[
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "Preempted in order to admit critical pod",
                }
            ],
        )
        restarting = await recorder.wait_for(ObservedState.RESTARTING)
        assert restarting.reason == "PreemptionByScheduler"
        assert "does not count as a failure" in restarting.message
        second = await cluster.create_pod()
        await cluster.run_pod(second)
        await recorder.wait_for(ObservedState.RUNNING, where=lambda o: second in o.message)
        assert all(o.state is not ObservedState.FAILED for o in recorder.seen)
    finally:
        await asyncio.to_thread(launcher.stop)


async def test_cancel_deletes_job_with_propagation(cluster, make_launcher, spec):
    launcher = make_launcher()
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    await asyncio.to_thread(launcher.cancel, JOB_ID)
    assert cluster.job() is None
    deletes = [r for r in list(cluster.server) if r.method == "DELETE" and r.resource and r.resource.plural == "jobs"]
    assert len(deletes) == 1 and deletes[0].data["propagationPolicy"] == "Foreground"
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert obs.state is ObservedState.GONE
    await asyncio.to_thread(launcher.cancel, JOB_ID)  # idempotent: nothing left is fine


async def test_logs_of_newest_pod(cluster, make_launcher, spec):
    launcher = make_launcher()
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    old = await cluster.create_pod()
    new = await cluster.create_pod()
    served = {old: b"old attempt\n", new: b'{"type": "run_started"}\nstep 1\n'}
    cluster.server[lambda req: req.subresource == "log"] << (lambda req: served[req.name])
    lines = await asyncio.to_thread(lambda: list(launcher.logs(JOB_ID, follow=True, tail_lines=10)))
    assert [line for line in lines if line is not None] == ['{"type": "run_started"}', "step 1"]
    log_req = [r for r in list(cluster.server) if r.subresource == "log"][-1]
    assert log_req.params["follow"] == "true" and log_req.params["tailLines"] == "10"


async def test_a_pods_log_is_read_in_pieces_with_each_line_cut(cluster, make_launcher, spec):
    """A pod's log is what team code printed: one 3 MiB line is cut to MAX_LINE_BYTES with the cut named, not held
    whole (the client's own line splitter kept a line of any length), and a last line without its newline is a line
    (the client's splitter dropped it). Following, the launcher says after each piece that what arrived is given."""
    from service.adapters.log_lines import MAX_LINE_BYTES

    launcher = make_launcher()
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    await cluster.create_pod()
    huge = 3 * 1024 * 1024
    cluster.server[lambda req: req.subresource == "log"] << (lambda req: b"start\n" + b"x" * huge + b"\nlast, unfinished")
    for follow in (False, True):
        lines = await asyncio.to_thread(lambda f=follow: list(launcher.logs(JOB_ID, follow=f)))
        assert [line for line in lines if line is not None] == [
            "start",
            "x" * MAX_LINE_BYTES + f" [... {huge - MAX_LINE_BYTES} more bytes of this line not shown]",
            "last, unfinished",
        ]
        assert (None in lines) is follow


async def test_mirror_status_patches_labels_and_annotations(cluster, make_launcher, spec):
    launcher = make_launcher()
    await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    assert await asyncio.to_thread(launcher.mirror_status, JOB_ID, "running", "train", 12, 50)
    meta = cluster.job()["metadata"]
    assert meta["labels"]["rljob.dev/phase"] == "running"
    assert meta["annotations"]["rljob.dev/stage"] == "train"
    assert meta["annotations"]["rljob.dev/progress"] == "12/50"
    assert meta["annotations"]["rljob.dev/spec-hash"] == spec.content_hash()  # merge, not replace


async def test_multi_host_launch_creates_a_jobset(cluster, make_launcher):
    launcher = make_launcher()
    result = await asyncio.to_thread(launcher.launch, JOB_ID, make_spec("v6e-16", 4))
    assert result.object_name == f"jobset/{JOB_ID}"
    jobset = cluster.server.objects["jobset.x-k8s.io/v1alpha2/jobsets", NS, JOB_ID]
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 4
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert obs.state is ObservedState.PENDING and obs.object_name == f"jobset/{JOB_ID}"
    await asyncio.to_thread(launcher.cancel, JOB_ID)
    assert ("jobset.x-k8s.io/v1alpha2/jobsets", NS, JOB_ID) not in cluster.server.objects or cluster.server.objects[
        "jobset.x-k8s.io/v1alpha2/jobsets", NS, JOB_ID
    ].deleted


async def test_watch_alone_delivers_observations(cluster, make_launcher, recorder, spec):
    # With the periodic reconcile out of reach, only the watches can tell the launcher anything.
    launcher = make_launcher(watch_resync_interval_s=600)
    launcher.start(recorder)
    try:
        await asyncio.to_thread(launcher.launch, JOB_ID, spec)
        await recorder.wait_for(ObservedState.PENDING)
        pod = await cluster.create_pod()
        await cluster.run_pod(pod)  # a pod event only: the Job object does not change
        await recorder.wait_for(ObservedState.RUNNING)
        await cluster.set_job_conditions({"type": "Complete"}, succeeded=1)
        await recorder.wait_for(ObservedState.SUCCEEDED)
    finally:
        await asyncio.to_thread(launcher.stop)
