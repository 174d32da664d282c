"""LocalProcessLauncher with real child processes running harness/fake_trainer.py."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from service.adapters.local import LocalProcessLauncher, procs
from service.domain.records.ports import ObservedState
from tests.service.conftest import MakeLocalLauncher
from tests.service.observation_recorder import Recorder
from tests.service.service_helpers import spec_body, wait_until
from trainer.contract import JobSpec, RunLayout


@pytest.fixture
def make_launcher(make_local_launcher: MakeLocalLauncher) -> MakeLocalLauncher:
    return make_local_launcher


def _spec(tmp_path: Path, **labels: str) -> JobSpec:
    return JobSpec.model_validate(spec_body(tmp_path, labels=labels))


def _root(tmp_path: Path, job_id: str) -> Path:
    return Path(RunLayout(str(tmp_path / "runs"), job_id).root)


def _open_gate(tmp_path: Path, job_id: str) -> None:
    root = _root(tmp_path, job_id)
    wait_until((root / "starts").exists)  # the trainer has started and made its run dir
    (root / "gate").touch()


def _alive(pid: int) -> bool:
    return procs.is_alive(pid)


def test_success_reports_running_then_succeeded(make_launcher, tmp_path: Path) -> None:
    launcher, rec = make_launcher()
    result = launcher.launch("rl-aaaaaaaaaaa1", _spec(tmp_path))
    assert result.backend == "local" and result.object_name.startswith("pid:")
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states("rl-aaaaaaaaaaa1"))
    assert rec.states("rl-aaaaaaaaaaa1") == [ObservedState.RUNNING, ObservedState.SUCCEEDED]
    assert rec.last("rl-aaaaaaaaaaa1").exit_code == 0  # type: ignore[union-attr]
    events = (_root(tmp_path, "rl-aaaaaaaaaaa1") / "events.jsonl").read_text().splitlines()
    assert json.loads(events[-1])["type"] == "run_finished"
    log = list(launcher.logs("rl-aaaaaaaaaaa1"))
    assert any("run_finished" in line for line in log) and log[0].startswith("=== rljob: starting")
    assert launcher.observe("rl-aaaaaaaaaaa1").state is ObservedState.SUCCEEDED


def test_failure_reports_the_trainers_exit_code(make_launcher, tmp_path: Path) -> None:
    launcher, rec = make_launcher()
    launcher.launch("rl-aaaaaaaaaaa2", _spec(tmp_path, **{"fake-exit": "70"}))
    wait_until(lambda: ObservedState.FAILED in rec.states("rl-aaaaaaaaaaa2"))
    assert rec.last("rl-aaaaaaaaaaa2").exit_code == 70  # type: ignore[union-attr]
    assert "fake failure in train" in "\n".join(launcher.logs("rl-aaaaaaaaaaa2", tail_lines=5))


@pytest.mark.parametrize("ignore_term", [False, True], ids=["sigterm", "sigkill-after-grace"])
def test_cancel_kills_the_whole_process_group(make_launcher, tmp_path: Path, ignore_term: bool) -> None:
    launcher, rec = make_launcher(cancel_grace_s=0.3)
    labels = {"fake-gate": "true", "fake-child": "true", **({"fake-ignore-term": "true"} if ignore_term else {})}
    job_id = "rl-aaaaaaaaaaa3"
    launcher.launch(job_id, _spec(tmp_path, **labels))
    child_file = _root(tmp_path, job_id) / "child.pid"
    wait_until(child_file.exists)
    grandchild = int(child_file.read_text())
    pgid = int(rec.last(job_id).object_name.split(":")[1])  # type: ignore[union-attr]
    assert _alive(grandchild) and os.getpgid(grandchild) == pgid

    launcher.cancel(job_id)
    wait_until(lambda: rec.last(job_id).state is not ObservedState.RUNNING)  # type: ignore[union-attr]
    final = rec.last(job_id)
    assert final is not None and final.state is ObservedState.FAILED
    assert not _alive(grandchild), "the trainer's own child must die with the job"
    assert procs.group_members(pgid) == []
    if ignore_term:
        assert final.exit_code in (None, 137)


def test_the_machines_job_limit_queues_jobs_in_submission_order(make_launcher, tmp_path: Path) -> None:
    launcher, rec = make_launcher(max_concurrent=1)
    first, second = "rl-aaaaaaaaaaa4", "rl-aaaaaaaaaaa5"
    launcher.launch(first, _spec(tmp_path, **{"fake-gate": "true"}))
    result = launcher.launch(second, _spec(tmp_path))
    assert result.object_name == "queued"
    queued = launcher.observe(second)
    assert queued.state is ObservedState.QUEUED and queued.queue is not None
    assert (queued.queue.reason, queued.queue.position) == ("HostSlots", 1)
    assert queued.queue.message == "this machine runs 1 of its 1 concurrent jobs"
    assert not _root(tmp_path, second).exists()  # really not started
    _open_gate(tmp_path, first)
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states(second))
    assert rec.states(first)[-1] is ObservedState.SUCCEEDED
    assert rec.states(second) == [ObservedState.QUEUED, ObservedState.RUNNING, ObservedState.SUCCEEDED]


def test_cancel_of_a_queued_job_removes_it(make_launcher, tmp_path: Path) -> None:
    launcher, rec = make_launcher(max_concurrent=1)
    launcher.launch("rl-aaaaaaaaaaa6", _spec(tmp_path, **{"fake-gate": "true"}))
    launcher.launch("rl-aaaaaaaaaaa7", _spec(tmp_path))
    launcher.cancel("rl-aaaaaaaaaaa7")
    assert rec.states("rl-aaaaaaaaaaa7") == [ObservedState.QUEUED, ObservedState.GONE]
    _open_gate(tmp_path, "rl-aaaaaaaaaaa6")
    wait_until(lambda: ObservedState.SUCCEEDED in rec.states("rl-aaaaaaaaaaa6"))
    assert not _root(tmp_path, "rl-aaaaaaaaaaa7").exists()


def test_a_waiting_queue_is_weighed_again_only_when_a_job_ends(make_launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.adapters.local import launcher as launcher_module

    weighed: list[int] = []
    real_admit = launcher_module.admit
    monkeypatch.setattr(launcher_module, "admit", lambda waiting, *a: weighed.append(len(waiting)) or real_admit(waiting, *a))
    launcher, rec = make_launcher(max_concurrent=1)
    first = "rl-aaaaaaaaaab1"
    launcher.launch(first, _spec(tmp_path, **{"fake-gate": "true"}))
    waiting = [f"rl-aaaaaaaaaac{i}" for i in range(5)]
    for job_id in waiting:
        launcher.launch(job_id, _spec(tmp_path))
    rounds: list[None] = []
    real_poll = launcher.poll_once
    monkeypatch.setattr(launcher, "poll_once", lambda: rounds.append(None) or real_poll())
    weighed.clear()
    wait_until(lambda: len(rounds) >= 5)  # the monitor's rounds while the first job runs
    assert weighed == []
    _open_gate(tmp_path, first)
    wait_until(lambda: ObservedState.RUNNING in rec.states(waiting[0]))
    assert weighed[0] == len(waiting)  # the round that saw the first job end


def test_restart_reattaches_to_the_running_process_without_duplicating(make_launcher, tmp_path: Path) -> None:
    job_id = "rl-aaaaaaaaaaa8"
    old, old_rec = make_launcher()
    old.launch(job_id, _spec(tmp_path, **{"fake-gate": "true"}))
    wait_until(lambda: (_root(tmp_path, job_id) / "starts").exists())
    pid = int(old_rec.last(job_id).object_name.split(":")[1])  # type: ignore[union-attr]
    old.stop()  # the service goes away; the trainer keeps running in its own session

    new, new_rec = make_launcher()
    seen = new.observe(job_id)
    assert seen.state is ObservedState.RUNNING and seen.object_name == f"pid:{pid}"
    assert new.launch(job_id, _spec(tmp_path, **{"fake-gate": "true"})).object_name == f"pid:{pid}"
    _open_gate(tmp_path, job_id)
    wait_until(lambda: ObservedState.SUCCEEDED in new_rec.states(job_id))
    assert new_rec.last(job_id).exit_code == 0  # type: ignore[union-attr]  # from exit.json: not our child
    assert len((_root(tmp_path, job_id) / "starts").read_text().splitlines()) == 1


def test_restart_after_the_process_died_reports_gone(make_launcher, tmp_path: Path) -> None:
    job_id = "rl-aaaaaaaaaaa9"
    old, old_rec = make_launcher()
    old.launch(job_id, _spec(tmp_path, **{"fake-gate": "true"}))
    wait_until(lambda: (_root(tmp_path, job_id) / "starts").exists())
    pid = int(old_rec.last(job_id).object_name.split(":")[1])  # type: ignore[union-attr]
    old.stop()
    procs.signal_group(pid, signal.SIGKILL)  # the machine "crashed": no exit record
    wait_until(lambda: procs.group_members(pid) == [])

    new, _ = make_launcher()
    assert new.observe(job_id).state is ObservedState.GONE


def test_a_reused_pid_is_not_mistaken_for_our_process(make_launcher, tmp_path: Path) -> None:
    job_id = "rl-aaaaaaaaab10"
    job_dir = tmp_path / "jobs" / job_id
    job_dir.mkdir(parents=True)
    me = os.getpid()  # alive, but not our runner: must not be adopted (or killed by a cancel)
    (job_dir / "process.json").write_text(json.dumps({"pid": me, "ticks": procs.start_ticks(me), "job_id": job_id}))
    launcher, _ = make_launcher()
    assert launcher.observe(job_id).state is ObservedState.GONE
    launcher.cancel(job_id)  # nothing of ours to stop; must not signal pid `me`
    (job_dir / "process.json").unlink()


def test_a_runner_that_started_at_another_time_is_not_adopted(make_launcher, tmp_path: Path) -> None:
    job_id = "rl-aaaaaaaaab12"
    old, _ = make_launcher()
    old.launch(job_id, _spec(tmp_path, **{"fake-gate": "true"}))
    wait_until(lambda: (_root(tmp_path, job_id) / "starts").exists())
    old.stop()
    record_file = tmp_path / "jobs" / job_id / "process.json"
    record = json.loads(record_file.read_text())
    # As if the recorded runner had died and its pid gone to a later process with the same cmdline.
    record_file.write_text(json.dumps({**record, "ticks": record["ticks"] - 1}))
    new, _ = make_launcher()
    assert new.observe(job_id).state is ObservedState.GONE
    new.cancel(job_id)
    assert _alive(record["pid"]), "a process that is not ours was signalled"


def test_start_ticks_are_what_earlier_versions_recorded() -> None:
    # process.json from before psutil holds /proc/PID/stat's starttime: a service upgraded under a
    # running job must still recognise its runner.
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert procs.start_ticks(os.getpid()) == int(stat[stat.rfind(")") + 2 :].split()[19])


def test_exit_while_no_service_watched_is_read_from_the_exit_file(make_launcher, tmp_path: Path) -> None:
    job_id = "rl-aaaaaaaaab11"
    old, _ = make_launcher()
    old.launch(job_id, _spec(tmp_path, **{"fake-gate": "true", "fake-exit": "75"}))
    wait_until(lambda: (_root(tmp_path, job_id) / "starts").exists())
    old.stop()
    _open_gate(tmp_path, job_id)
    wait_until(lambda: (tmp_path / "jobs" / job_id / "exit.json").exists())
    pid = json.loads((tmp_path / "jobs" / job_id / "process.json").read_text())["pid"]
    wait_until(lambda: procs.group_members(pid) == [])
    new, _ = make_launcher()
    seen = new.observe(job_id)
    assert (seen.state, seen.exit_code) == (ObservedState.FAILED, 75)


def test_follow_logs_ends_when_the_process_stops(make_launcher, tmp_path: Path) -> None:
    launcher, _ = make_launcher()
    job_id = "rl-aaaaaaaaab12"
    launcher.launch(job_id, _spec(tmp_path, **{"fake-gate": "true"}))
    lines: list[str] = []
    idle_steps: list[float] = []

    def read() -> None:  # like the API: on None (nothing new yet) the caller pauses, then asks again
        for line in launcher.logs(job_id, follow=True):
            if line is None:
                idle_steps.append(time.monotonic())
                time.sleep(0.02)
            else:
                lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_until(lambda: any("waiting for the gate" in line for line in lines))
    seen = len(idle_steps)
    wait_until(lambda: len(idle_steps) > seen + 3, timeout_s=5)  # an idle follow hands back control each poll
    _open_gate(tmp_path, job_id)
    reader.join(timeout=20)
    assert not reader.is_alive()
    assert "event run_finished seq=" in lines[-1]


def test_a_log_tail_reads_the_file_without_holding_it_all(make_launcher, tmp_path: Path) -> None:
    launcher, _ = make_launcher()
    job_id = "rl-aaaaaaaaab13"
    log_dir = tmp_path / "jobs" / job_id
    log_dir.mkdir(parents=True)
    with (log_dir / "output.log").open("w") as f:
        for i in range(200_000):
            f.write(f"step {i:08d} loss 0.123456789 a line of ordinary trainer output\n")  # ~13 MB
    tracemalloc.start()
    try:
        tail = list(launcher.logs(job_id, tail_lines=3))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [line.split()[1] for line in tail] == ["00199997", "00199998", "00199999"]
    assert peak < 2 * 1024 * 1024, f"peak {peak} bytes: the whole log was held in memory"


@pytest.mark.parametrize("tail_lines", [5, None])
def test_one_huge_line_is_read_in_bounded_pieces_and_shown_cut(make_launcher, tmp_path: Path, tail_lines) -> None:
    """One 64 MiB line (team code prints what it likes): line by line, reading it held all of it, even for a tail of
    5 (a 512 MiB one took the service to 1.1 GB)."""
    from service.adapters.log_lines import MAX_LINE_BYTES

    launcher, _ = make_launcher()
    job_id = "rl-aaaaaaaaab14"
    log_dir = tmp_path / "jobs" / job_id
    log_dir.mkdir(parents=True)
    huge = 64 * 1024 * 1024
    with (log_dir / "output.log").open("wb") as f:
        f.write(b"first\n")
        for _ in range(huge // (1024 * 1024)):
            f.write(b"x" * (1024 * 1024))
        f.write(b"\nlast, unfinished")
    tracemalloc.start()
    try:
        lines = list(launcher.logs(job_id, tail_lines=tail_lines))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes: the line was held whole"
    if tail_lines is None:  # the whole log: the line's first MAX_LINE_BYTES, and how much was not shown
        assert lines[0] == "first" and lines[2] == "last, unfinished" and len(lines) == 3
        assert lines[1] == "x" * MAX_LINE_BYTES + f" [... {huge - MAX_LINE_BYTES} more bytes of this line not shown]"
    else:  # a tail looks back 8 MiB: the line's start is further, and it says so
        assert lines[-1] == "last, unfinished" and len(lines) == 2
        assert lines[0].startswith("[... the start of this line is over 8 MiB back, not shown] xxx"), lines[0][:100]
        assert lines[0].endswith(" more bytes of this line not shown]") and len(lines[0]) < MAX_LINE_BYTES + 200


def test_the_trainer_gets_no_service_secrets(tmp_path: Path) -> None:
    import sys

    dump_env = "import json, os; open('env.json', 'w').write(json.dumps(dict(os.environ)))"
    service_env = {
        **os.environ,
        "RLJOB_DATABASE_URL": "postgresql://rljob:hunter2@db/rljob",
        "RLJOB_BOOTSTRAP_TOKEN": "tok-secret",
        "RLJOB_WORK_DIR": str(tmp_path / "work"),
        "RLJOB_CONVERSION_CACHE": "gs://cache/x",
        "HF_TOKEN": "hf_for_the_trainer",
    }
    command = [sys.executable, "-c", dump_env]
    launcher = LocalProcessLauncher(tmp_path / "jobs", command, poll_interval_s=0.05, env=service_env)
    recorder = Recorder()
    launcher.start(recorder)
    try:
        job_id = "rl-aaaaaaaaab14"
        launcher.launch(job_id, _spec(tmp_path))
        wait_until(lambda: ObservedState.SUCCEEDED in recorder.states(job_id))
    finally:
        launcher.stop()
    env = json.loads((tmp_path / "jobs" / job_id / "env.json").read_text())
    assert "RLJOB_DATABASE_URL" not in env and "RLJOB_BOOTSTRAP_TOKEN" not in env
    assert env["RLJOB_WORK_DIR"] == str(tmp_path / "work") and env["RLJOB_CONVERSION_CACHE"] == "gs://cache/x"
    assert env["RLJOB_JOB_ID"] == job_id and env["HF_TOKEN"] == "hf_for_the_trainer"
