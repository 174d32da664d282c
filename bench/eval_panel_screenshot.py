"""Screenshot of a job page's eval panel, from a real `rljob serve`, into bench/results/eval-panel.png.

What is real: the service (`python -m service.cli.main serve`, SQLite and the local launcher in a temp
dir), the job (submitted over REST, run as a process group by the local launcher), the channel (the
job's events.jsonl, tailed and folded into JobPublic.eval by the service), the 95% intervals (the
service's), the page (the built dashboard in headless Debian Chromium, signed in with a token).
What is scripted: the trainer. The job's process is tests/dashboard/held_trainer.py, which trains
nothing, and this script writes the events a run writes: stages, 20 train steps, and three
evaluations whose per-row outcomes are made up (tests/dashboard/eval_story.py: 102 -> 135 -> 153 of
300 right, with known flips; the paired change is the trainer's own `paired_difference`).
A real tiny CPU run would show a random model's 0% -> 0%, which shows the panel less well.

    python bench/eval_panel_screenshot.py [--out bench/results/eval-panel.png]

Needs the built dashboard (scripts/build-dashboard.sh) and /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.cli.client import ClientConfig, CliError, RljobClient  # noqa: E402
from service.cli.demo import _wait_ready  # noqa: E402
from service.domain.tokens import generate_token  # noqa: E402
from service.free_port import free_port  # noqa: E402
from service.process_stop import terminate_then_kill  # noqa: E402
from tests.dashboard.browser import CHROMIUM, launch_chromium  # noqa: E402
from tests.dashboard.eval_story import HEADLINE, TOTAL_STEPS, eval_summaries  # noqa: E402
from tests.dashboard.held_trainer import __file__ as HELD_TRAINER  # noqa: E402
from trainer.contract import SIGNAL_METRIC, RunLayout, dump_event, parse_event  # noqa: E402

OUT = REPO / "bench" / "results" / "eval-panel.png"
WAIT_S = 60.0  # for the job to run, and for the page to show what the service folded in


class EventWriter:
    """Appends trainer events to a job's events.jsonl as the trainer does (validated by the contract)."""

    def __init__(self, runs_dir: Path, job_id: str) -> None:
        self.path = Path(RunLayout(str(runs_dir), job_id).events)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.job_id, self.seq = job_id, 0

    def __call__(self, type: str, **fields: Any) -> None:
        raw = {"type": type, "seq": self.seq, "time": datetime.now(UTC).isoformat(), "job_id": self.job_id, **fields}
        self.seq += 1
        with self.path.open("a") as f:
            f.write(dump_event(parse_event(json.dumps(raw))) + "\n")


def wait_for(what: str, check: Any, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f}s")


def play_run(emit: EventWriter, run_uri: str) -> None:
    """A 20-step run with train_rl's evaluations: before, at step 10, after."""
    before, step_10, after = eval_summaries()
    emit("run_started", attempt=1, run_uri=run_uri)
    emit("stage_started", stage="convert")
    emit("stage_finished", stage="convert", duration_s=312.0)
    emit("stage_started", stage="train")
    emit("eval", step=0, accuracy=before.correct / before.n, summary=before.model_dump(mode="json"))
    for step in range(1, TOTAL_STEPS + 1):
        reward = 0.30 + 0.012 * step + 0.03 * ((step * 7) % 5 - 2) / 2  # a rising, noisy mean
        emit("train_step", step=step, total_steps=TOTAL_STEPS, reward_mean=round(reward, 3), reward_std=0.21,
             kl=round(0.002 * step, 4), loss=round(0.05 / step**0.5, 4), metrics={SIGNAL_METRIC: 0.6})  # fmt: skip
        if step == 10:
            emit("eval", step=10, accuracy=step_10.correct / step_10.n, summary=step_10.model_dump(mode="json"))
    emit("eval", step=TOTAL_STEPS, accuracy=after.correct / after.n, summary=after.model_dump(mode="json"))
    emit("stage_finished", stage="train", duration_s=1830.0)
    emit("stage_started", stage="export")
    emit("stage_finished", stage="export", duration_s=95.0)
    emit("run_finished", ok=True, exit_code=0)


def stop_job(client: RljobClient, job_id: str) -> None:
    """Cancel the job if this script failed half-way: the local launcher leaves a workload running
    when the service stops (to re-attach to it), and the held trainer would wait for minutes."""
    try:
        if client.request("GET", f"/v1/jobs/{job_id}")["phase"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return
        client.request("POST", f"/v1/jobs/{job_id}/cancel")
        wait_for("CANCELLED", lambda: client.request("GET", f"/v1/jobs/{job_id}")["phase"] == "CANCELLED", timeout_s=30)
    except (CliError, TimeoutError) as e:
        print(f"could not stop {job_id}: {e}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is absent: apt-get install -y chromium", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="rljob-eval-panel-"))
    state, runs = work / "service", work / "runs"
    state.mkdir()
    port, token = free_port(), generate_token()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}  # only this script's settings
    env |= {"RLJOB_BOOTSTRAP_TOKEN": token, "RLJOB_BOOTSTRAP_TEAM": "alpha", "RLJOB_ENVIRONMENT": "dev",
            "RLJOB_LAUNCHER": "local", "RLJOB_TRAINER_COMMAND": json.dumps([sys.executable, HELD_TRAINER]),
            "RLJOB_PROGRESS_POLL_INTERVAL_S": "0.2"}  # fmt: skip
    log = (state / "service.log").open("ab")
    server = subprocess.Popen([sys.executable, "-m", "service.cli.main", "serve", "--host", "127.0.0.1", "--port",
                               str(port), "--state-dir", str(state)], stdout=log, stderr=subprocess.STDOUT, env=env,
                              cwd=REPO)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    client = RljobClient(ClientConfig(url=url, token=token, config_file=None))
    job_id = None
    try:
        _wait_ready(client, server, state / "service.log")
        spec = {"name": "gsm8k-llama-grpo", "output": str(runs),
                "model": {"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B-Instruct"},
                "grpo": {"num_batches": TOTAL_STEPS, "num_test_batches": 2},
                "hardware": {"accelerator": "cpu", "rollout_engine": "jax"}}  # fmt: skip
        submitted = client.request("POST", "/v1/jobs", json=spec)
        job_id = submitted["id"]
        wait_for("RUNNING", lambda: client.request("GET", f"/v1/jobs/{job_id}")["phase"] == "RUNNING")
        play_run(EventWriter(runs, job_id), submitted["run_uri"])
        (runs / job_id / "exit_code").write_text("0")  # the held trainer exits 0: the job succeeds
        job = wait_for("SUCCEEDED", lambda: (j := client.request("GET", f"/v1/jobs/{job_id}"))["phase"] == "SUCCEEDED" and j)
        print(f"service: {job_id} {job['phase']}, eval {json.dumps(job['eval']['difference'])}")
        with launch_chromium() as context:
            page = context.new_page()  # type: ignore[attr-defined]
            page.set_viewport_size({"width": 1366, "height": 900})
            page.goto(f"{url}/")
            page.get_by_label("API token").fill(token)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("button", name="Sign out").wait_for()  # the token is stored: routes now open
            page.goto(f"{url}/#/jobs/{job_id}")
            headline = page.get_by_test_id("eval-headline")
            headline.wait_for(timeout=WAIT_S * 1000)
            wait_for("the headline", lambda: headline.text_content() == HEADLINE)
            page.get_by_text("Each evaluation (3)").click()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out), full_page=True)
            print(f"page: {headline.text_content()} | {page.get_by_test_id('eval-difference').text_content()}")
        print(f"wrote {args.out}")
        return 0
    finally:
        if job_id is not None:
            stop_job(client, job_id)
        client.close()
        terminate_then_kill(server, grace_s=15)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
