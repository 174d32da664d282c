"""Failure paths against kmock: 410 Gone on a watch, a create whose response was lost."""

from __future__ import annotations

import asyncio

import kmock as kmock_lib
import pytest

from service.adapters.k8s import WorkloadConflict
from service.domain.records.ports import ObservedState

from .conftest import JOB_ID, NS

pytestmark = pytest.mark.timeout(30)

GONE_STATUS = {
    "apiVersion": "v1",
    "kind": "Status",
    "status": "Failure",
    "code": 410,
    "reason": "Expired",
    "message": "too old resource version: 1 (2)",
}


def _jobs(request) -> bool:
    return request.resource is not None and request.resource.plural == "jobs"


@pytest.mark.parametrize("how", ["http-410", "error-event"])
async def test_watch_410_gone_relists_and_recovers(cluster, make_launcher, recorder, spec, how):
    server = cluster.server
    first_job_watch = (server**10)[kmock_lib.action.WATCH][_jobs][:1]
    if how == "http-410":
        first_job_watch << 410 << GONE_STATUS
    else:  # what an API server does mid-stream when the resourceVersion has been compacted away
        first_job_watch << ({"type": "ERROR", "object": GONE_STATUS},)
    launcher = make_launcher(watch_resync_interval_s=600)
    launcher.start(recorder)
    try:
        jobs_watch = next(w for w in launcher.watches if w.kind == "jobs")
        await asyncio.to_thread(launcher.launch, JOB_ID, spec)
        await cluster.set_job_conditions({"type": "Complete"}, succeeded=1)
        await recorder.wait_for(ObservedState.SUCCEEDED)
        for _ in range(200):  # bounded: 2 s
            if jobs_watch.gone_count:
                break
            await asyncio.sleep(0.01)
        assert jobs_watch.gone_count == 1
        assert jobs_watch.lists >= 2  # listed at start, and again after the 410
    finally:
        await asyncio.to_thread(launcher.stop)


async def test_duplicate_create_after_lost_response_makes_one_job(cluster, make_launcher, spec):
    server = cluster.server
    # The first POST is stored (kmock applies it before reacting) but the client sees a 503.
    lost = (
        (server**10)[kmock_lib.action.CREATE][_jobs][:1]
        << 503
        << {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 503, "reason": "ServiceUnavailable"}
    )
    launcher = make_launcher()
    result = await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    assert result.object_name == f"job/{JOB_ID}"
    job_posts = [r for r in server if r.method == "POST" and _jobs(r)]
    assert len(job_posts) == 2 and len(list(lost)) == 1  # the retry hit 409 and was taken as success
    jobs = [key for key in server.objects if key[0].plural == "jobs" and not server.objects[key].deleted]
    assert jobs == [(kmock_lib.resource("batch", "v1", "jobs"), NS, JOB_ID)]
    # Launch is idempotent per job id: a second launch (e.g. after a service restart) finds it.
    again = await asyncio.to_thread(launcher.launch, JOB_ID, spec)
    assert again == result


async def test_create_conflict_with_another_jobs_object_is_refused(cluster, make_launcher, spec):
    await cluster._send(
        "POST",
        f"/apis/batch/v1/namespaces/{NS}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": JOB_ID, "namespace": NS, "labels": {"rljob.dev/job-id": "rl-someoneelse0"}},
        },
    )
    launcher = make_launcher()
    with pytest.raises(WorkloadConflict, match="rl-someoneelse0"):
        await asyncio.to_thread(launcher.launch, JOB_ID, spec)


async def test_jobset_terminal_states(cluster, make_launcher):
    from .conftest import make_spec

    launcher = make_launcher()
    await asyncio.to_thread(launcher.launch, JOB_ID, make_spec("v6e-16", 4))
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/{JOB_ID}"
    await cluster._send(
        "PATCH",
        path,
        {
            "status": {
                "restarts": 3,
                "terminalState": "Failed",
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "FailedJobs",
                        "message": "jobset failed due to reaching max number of restarts",
                    }
                ],
            }
        },
    )
    obs = await asyncio.to_thread(launcher.observe, JOB_ID)
    assert (obs.state, obs.reason, obs.object_name) == (ObservedState.FAILED, "FailedJobs", f"jobset/{JOB_ID}")
    assert "max number of restarts" in obs.message
    await cluster._send(
        "PATCH",
        path,
        {"status": {"terminalState": "Completed", "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]}},
    )
    assert (await asyncio.to_thread(launcher.observe, JOB_ID)).state is ObservedState.SUCCEEDED
