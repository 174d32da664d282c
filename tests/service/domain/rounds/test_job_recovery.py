"""Start-up recovery (JobRecovery), the slow reconcile (ActiveJobsReconciler) and the take-over of other replicas'
requests (RequestTakeOver): each re-asks the backend itself and changes jobs through JobService's public API only
(tests/service/test_domain_layers.py holds the last)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.adapters.store import SqlJobStore
from service.domain.job_service import JobService
from service.domain.job_service_parts import JobPorts
from service.domain.records.models import Caller, QueueStatus
from service.domain.records.phases import JobPhase
from service.domain.records.ports import ObservedState, utc_now
from service.domain.rounds.active_jobs_reconciler import ActiveJobsReconciler
from service.domain.rounds.recovery import JobRecovery
from service.domain.rounds.request_take_over import RequestTakeOver
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import spec_body
from trainer.contract import JobSpec

TEAM_A = Caller(team="team-a", token_id="tok_a")


def _running_then_cancelling(service: JobService, launcher: FakeLauncher, tmp_path: Path) -> str:
    job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path)))[0].id
    service.apply_observation(launcher.set(job_id, ObservedState.RUNNING, object_name="pid:7"))
    service.cancel(TEAM_A, job_id)
    launcher.cancelled.clear()  # the cancel that "did not reach the backend"
    return job_id


def test_recovery_sends_the_cancel_again_to_a_cancelling_job_still_running(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    job_id = _running_then_cancelling(service, fake_launcher, tmp_path)
    JobRecovery(service, store, fake_launcher).recover()
    record = store.get(job_id)
    assert fake_launcher.cancelled == [job_id]
    assert record is not None and record.phase is JobPhase.CANCELLING
    assert record.message == "re-attached to pid:7 after a service restart or a change of leader"
    messages = [e.data for e in store.events_after(0, job_id=job_id) if e.kind == "message"]
    assert messages[-1] == {"message": "re-attached to pid:7 after a service restart or a change of leader"}


@pytest.mark.parametrize("state", list(ObservedState))
def test_the_reconcile_sends_the_cancel_again_only_while_the_workload_is_seen_queued_pending_or_running(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path, state: ObservedState
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    job_id = _running_then_cancelling(service, fake_launcher, tmp_path)
    fake_launcher.set(job_id, state, object_name="pid:7")
    ActiveJobsReconciler(service, store, fake_launcher, clock=utc_now).reconcile_once()
    # RESTARTING is left out today: the backend is itself replacing the attempt, and the next
    # reconcile (or the watcher's RUNNING) brings the cancel again.
    # QUEUED: a suspended Job held by Kueue is still an object to delete.
    resent = state in (ObservedState.QUEUED, ObservedState.PENDING, ObservedState.RUNNING)
    assert fake_launcher.cancelled == ([job_id] if resent else [])
    stopped = state in (ObservedState.SUCCEEDED, ObservedState.FAILED, ObservedState.GONE)
    assert store.get(job_id).phase is (JobPhase.CANCELLED if stopped else JobPhase.CANCELLING)  # type: ignore[union-attr]


QUEUE = QueueStatus(name="team/team-a", position=1, reason="TeamJobLimit", message="team-a runs 2 of its 2 jobs")


def test_a_job_held_in_the_backends_queue_is_observed_not_launched_again(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path)))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.QUEUED, queue=QUEUE, object_name="fake/x"))
    record = store.get(job_id)
    assert record is not None and record.phase is JobPhase.QUEUED and record.handed_over and record.queue == QUEUE
    moved = QueueStatus(name="team/team-a", position=1, reason="TeamChipLimit")
    fake_launcher.set(job_id, ObservedState.QUEUED, queue=moved, object_name="fake/x")
    # Old enough that a never-launched job would be handed over again: this one is asked about instead.
    ActiveJobsReconciler(service, store, fake_launcher, clock=utc_now, queued_relaunch_after_s=0).reconcile_once()
    JobRecovery(service, store, fake_launcher).recover()
    assert fake_launcher.launched == [job_id]  # the submit's launch only
    record = store.get(job_id)
    assert record is not None and record.phase is JobPhase.QUEUED and record.queue == moved
    queue_events = [e.data for e in store.events_after(0, job_id=job_id) if e.kind == "queue"]
    assert queue_events == [moved.model_dump(mode="json")]


def test_cancel_of_a_queued_job_stops_the_workload_only_when_a_backend_holds_one(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    held = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path)))[0].id
    service.apply_observation(fake_launcher.set(held, ObservedState.QUEUED, queue=QUEUE))
    assert service.cancel(TEAM_A, held).phase is JobPhase.CANCELLING
    assert fake_launcher.cancelled == [held]
    service.apply_observation(fake_launcher.set(held, ObservedState.GONE))
    assert store.get(held).phase is JobPhase.CANCELLED  # type: ignore[union-attr]

    fake_launcher.cancelled.clear()
    service.launch = lambda job_id: None  # type: ignore[method-assign]  # stored, never handed over
    never = service.submit(TEAM_A, JobSpec.model_validate({**spec_body(tmp_path), "name": "never"}))[0].id
    assert service.cancel(TEAM_A, never).phase is JobPhase.CANCELLED
    assert fake_launcher.cancelled == []


def test_a_message_is_never_posted_on_a_job_that_has_ended(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path
) -> None:
    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path)))[0].id
    service.apply_observation(fake_launcher.set(job_id, ObservedState.SUCCEEDED, exit_code=0))
    seq = store.get(job_id).last_event_seq  # type: ignore[union-attr]
    service.post_message(job_id, "re-attached")
    record = store.get(job_id)
    assert record is not None and record.message == "finished successfully" and record.last_event_seq == seq


def test_a_take_over_round_between_the_store_and_the_launch_leaves_the_job_to_its_submission(
    store: SqlJobStore, fake_launcher: FakeLauncher, fake_progress: FakeProgress, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The take-over round runs on the supervisor's thread (where replicas share the store) and can read a submission's
    # QUEUED job before the submission's own launch: the job must reach the launcher once (seen twice under load).
    import threading

    service = JobService(JobPorts(store, fake_launcher, fake_progress))
    take_over = RequestTakeOver(service, store)
    launch, rounds = service.launch, []

    def launch_after_a_round(job_id: str) -> None:
        if not rounds:  # submit's launch: a round lands first, on its own thread, as the supervisor's would
            rounds.append(threading.Thread(target=take_over.take_over_requests))
            rounds[0].start()
            rounds[0].join()
        launch(job_id)

    monkeypatch.setattr(service, "launch", launch_after_a_round)
    job_id = service.submit(TEAM_A, JobSpec.model_validate(spec_body(tmp_path)))[0].id
    assert rounds and fake_launcher.launched == [job_id]
    assert not service.is_launching(job_id)
