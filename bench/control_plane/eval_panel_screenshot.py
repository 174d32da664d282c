"""Screenshot of a job page's eval panel, from a real `rljob serve`, into bench/results/eval-panel.png.

What is real: the service (`python -m service.cli.main serve`, SQLite and the local launcher in a temp
dir), the job (submitted over REST, run as a process group by the local launcher), the channel (the
job's events.jsonl, tailed and folded into JobPublic.train_evals by the service), the 95% intervals (the
service's), the page (the built dashboard in headless Debian Chromium, signed in with a token).
What is scripted (the default): the trainer. The job's process is harness/held_trainer.py,
which trains nothing, and this script writes the events a run writes: stages, 20 train steps, and three
evaluations whose per-row outcomes are made up (harness/eval_story.py: 102 -> 135 -> 153 of
300 right, with known flips; the paired change is the trainer's own `paired_difference`).

`--tiny` scripts nothing: it builds the tiny model offline (`python -m trainer make-tiny`), starts the
service as scripts/demo.py does (its default trainer command, `python -m trainer`), submits
examples/tiny-cpu.yaml (train_rl evaluates its 2 eval rows before and after 3 GRPO steps of a random
model, minutes on CPU), follows it to SUCCEEDED, and screenshots its page into
bench/results/eval-panel-tiny.png, with the job's `eval` and `health` from GET /v1/jobs/{id} in
eval-panel-tiny.json next to it; and the same page's goodput panel (where the job's wall time went) into
bench/results/goodput-bar.png, its `goodput` in goodput-bar.json. A random model's 0% -> 0% on 2 rows, with wide intervals, is what it
truthfully shows; the scripted mode shows the panel better.

    python bench/control_plane/eval_panel_screenshot.py [--out bench/results/eval-panel.png]
    python bench/control_plane/eval_panel_screenshot.py --tiny [--out bench/results/eval-panel-tiny.png]

Needs the built dashboard (scripts/build-dashboard.sh) and Chromium (harness/browser.py finds it).
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.result_meta import machine_facts, write_result  # noqa: E402
from harness.browser import ChromiumMissing, find_chromium, launch_chromium  # noqa: E402
from harness.eval_story import HEADLINE, TOTAL_STEPS, eval_summaries  # noqa: E402
from harness.held_trainer import __file__ as HELD_TRAINER  # noqa: E402
from service.cli.client import ClientConfig, CliError, RljobClient  # noqa: E402
from service.cli.demo import _wait_ready  # noqa: E402
from service.cli.follow import follow_job  # noqa: E402
from service.domain.tokens import generate_token  # noqa: E402
from service.free_port import free_port  # noqa: E402
from service.process_stop import terminate_then_kill  # noqa: E402
from trainer.contract import SIGNAL_METRIC, RunLayout, dump_event, parse_event  # noqa: E402

OUT = REPO / "bench" / "results" / "eval-panel.png"
TINY_OUT = REPO / "bench" / "results" / "eval-panel-tiny.png"
GOODPUT_OUT = REPO / "bench" / "results" / "goodput-bar.png"  # --tiny: the same job's goodput panel
TINY_SPEC = REPO / "examples" / "tiny-cpu.yaml"
WAIT_S = 60.0  # for the job to run, and for the page to show what the service folded in
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


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
        emit(
            "train_step",
            step=step,
            total_steps=TOTAL_STEPS,
            reward_mean=round(reward, 3),
            reward_std=0.21,
            kl=round(0.002 * step, 4),
            loss=round(0.05 / step**0.5, 4),
            metrics={SIGNAL_METRIC: 0.6},
        )
        if step == 10:
            emit("eval", step=10, accuracy=step_10.correct / step_10.n, summary=step_10.model_dump(mode="json"))
    emit("eval", step=TOTAL_STEPS, accuracy=after.correct / after.n, summary=after.model_dump(mode="json"))
    emit("stage_finished", stage="train", duration_s=1830.0)
    emit("stage_started", stage="export")
    emit("stage_finished", stage="export", duration_s=95.0)
    emit("run_finished", ok=True, exit_code=0)


@dataclass
class Service:
    """A running `rljob serve` on a free loopback port, its client, and the job this script submitted."""

    url: str
    token: str
    client: RljobClient
    runs: Path  # the jobs' output directory
    job_id: str | None = field(default=None)

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        submitted: dict[str, Any] = self.client.request("POST", "/v1/jobs", json=spec)
        self.job_id = submitted["id"]
        return submitted

    def job(self) -> dict[str, Any]:
        job: dict[str, Any] = self.client.request("GET", f"/v1/jobs/{self.job_id}")
        return job


def stop_job(service: Service) -> None:
    """Cancel the job if this script failed half-way: the local launcher leaves a workload running
    when the service stops (to re-attach to it), and the trainer would run on for minutes."""
    if service.job_id is None:
        return
    try:
        if service.job()["phase"] in TERMINAL:
            return
        service.client.request("POST", f"/v1/jobs/{service.job_id}/cancel")
        wait_for("CANCELLED", lambda: service.job()["phase"] == "CANCELLED", timeout_s=30)
    except (CliError, TimeoutError) as e:
        print(f"could not stop {service.job_id}: {e}", file=sys.stderr)


@contextmanager
def serving(work: Path, settings: dict[str, str]) -> Iterator[Service]:
    """`rljob serve` with SQLite and the local launcher in `work` (removed afterwards), plus `settings`."""
    state = work / "service"
    state.mkdir(parents=True)
    port, token = free_port(), generate_token()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJOB_")}  # only this script's settings
    env |= {
        "RLJOB_BOOTSTRAP_TOKEN": token,
        "RLJOB_BOOTSTRAP_TEAM": "alpha",
        "RLJOB_ENVIRONMENT": "dev",
        "RLJOB_LAUNCHER": "local",
        **settings,
    }
    log = (state / "service.log").open("ab")
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port), "--state-dir", str(state)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    service = Service(url, token, RljobClient(ClientConfig(url=url, token=token, config_file=None)), work / "runs")
    try:
        _wait_ready(service.client, server, state / "service.log")
        yield service
    finally:
        stop_job(service)
        service.client.close()
        terminate_then_kill(server, grace_s=15)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def job_page(service: Service) -> Iterator[Any]:
    """A Chromium page signed in with the service's token, on the job's page."""
    with launch_chromium() as context:
        page = context.new_page()  # type: ignore[attr-defined]
        page.set_viewport_size({"width": 1366, "height": 900})
        page.goto(f"{service.url}/")
        page.get_by_label("API token").fill(service.token)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("button", name="Sign out").wait_for()  # the token is stored: routes now open
        page.goto(f"{service.url}/#/jobs/{service.job_id}")
        yield page


def screenshot(service: Service, out: Path, headline_ready: Callable[[str], bool], evaluations: int) -> None:
    """Wait for the job page's eval headline, open the table of evaluations and screenshot the whole
    page into `out`."""
    with job_page(service) as page:
        headline = page.get_by_test_id("eval-headline")
        headline.wait_for(timeout=WAIT_S * 1000)
        wait_for("the headline", lambda: headline_ready(headline.text_content() or ""))
        page.get_by_text(f"Each evaluation ({evaluations})").click()
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        print(f"page: {headline.text_content()} | {page.get_by_test_id('eval-difference').text_content()}")
        health = page.get_by_test_id("health")
        if health.count():
            print(f"page health: {health.first.text_content()}")
    print(f"wrote {out}")


def scripted(out: Path) -> int:
    """The held trainer, and this script writing a 20-step run's events (play_run)."""
    work = Path(tempfile.mkdtemp(prefix="rljob-eval-panel-"))
    settings = {"RLJOB_TRAINER_COMMAND": json.dumps([sys.executable, HELD_TRAINER]), "RLJOB_PROGRESS_POLL_INTERVAL_S": "0.2"}
    with serving(work, settings) as service:
        spec = {
            "name": "gsm8k-llama-grpo",
            "output": str(service.runs),
            "model": {"name": "llama3.1-8b", "source": "meta-llama/Llama-3.1-8B-Instruct"},
            "grpo": {"num_batches": TOTAL_STEPS, "num_test_batches": 2},
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        }
        submitted = service.submit(spec)
        wait_for("RUNNING", lambda: service.job()["phase"] == "RUNNING")
        play_run(EventWriter(service.runs, submitted["id"]), submitted["run_uri"])
        (service.runs / submitted["id"] / "exit_code").write_text("0")  # the held trainer exits 0: the job succeeds
        job = wait_for("SUCCEEDED", lambda: (j := service.job())["phase"] == "SUCCEEDED" and j)
        print(f"service: {job['id']} {job['phase']}, eval {json.dumps(job['eval']['difference'])}")
        screenshot(service, out, lambda text: text == HEADLINE, evaluations=3)
    return 0


def tiny(out: Path) -> int:
    """The real trainer's tiny CPU job (examples/tiny-cpu.yaml), as scripts/demo.py runs it."""
    machine = machine_facts()
    work = Path(tempfile.mkdtemp(prefix="rljob-eval-panel-tiny-"))
    tiny_dir = work / "tiny"
    made = subprocess.run([sys.executable, "-m", "trainer", "make-tiny", "--out", str(tiny_dir)], cwd=REPO, check=False)
    if made.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        print(f"`python -m trainer make-tiny` failed with exit code {made.returncode}", file=sys.stderr)
        return 1
    offline = dict.fromkeys(("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"), "1")
    with serving(work, offline) as service:  # the default trainer command: python -m trainer
        text = TINY_SPEC.read_text().replace("${RLJOB_TINY_DIR}", str(tiny_dir)).replace("${RLJOB_OUTPUT}", str(service.runs))
        submitted = service.submit(yaml.safe_load(text))
        print(f"submitted {submitted['id']}; following it")
        job = follow_job(service.client, submitted["id"], Console())
        if job["phase"] != "SUCCEEDED":
            print(service.client.request("GET", f"/v1/jobs/{job['id']}/logs", params={"tail_lines": 60}), file=sys.stderr)
            print(f"the job ended {job['phase']}", file=sys.stderr)
            return 1
        record = {
            "job_id": job["id"],
            "spec": "examples/tiny-cpu.yaml",
            "phase": job["phase"],
            "step": job["step"],
            "total_steps": job["total_steps"],
            "eval": job["train_evals"],
            "health": job["health"],
        }
        print(f"eval: {json.dumps(job['train_evals'], indent=2)}")
        print(f"health: {job['health']['verdict']}: {job['health']['message']}")
        record_path = out.with_suffix(".json")
        record_path.parent.mkdir(parents=True, exist_ok=True)
        record_path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {record_path}")
        screenshot(service, out, bool, evaluations=len(job["train_evals"]["points"]))
        goodput_screenshot(service, GOODPUT_OUT, job["goodput"], machine)
    return 0


def goodput_screenshot(service: Service, out: Path, goodput: dict[str, Any], machine: dict[str, Any]) -> None:
    """The job page's goodput panel (the stacked bar of where the wall time went) into `out`, with the
    job's `goodput` from GET /v1/jobs/{id} beside it (`out` with .json, and the machine's facts)."""
    write_result(out.with_suffix(".json").name, {"job_id": service.job_id, "spec": "examples/tiny-cpu.yaml", "goodput": goodput}, machine)
    with job_page(service) as page:
        panel = page.get_by_test_id("goodput")
        page.get_by_test_id("goodput-bar").wait_for(timeout=WAIT_S * 1000)
        panel.screenshot(path=str(out))
        print(f"page: {page.get_by_test_id('goodput-headline').text_content()}")
    print(f"wrote {out} and {out.with_suffix('.json')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="run the real trainer's tiny CPU job (minutes) instead of a scripted one")
    parser.add_argument(
        "--out", type=Path, default=None, help=f"default: {OUT.relative_to(REPO)}, with --tiny {TINY_OUT.relative_to(REPO)}"
    )
    args = parser.parse_args()
    try:
        find_chromium()
    except ChromiumMissing as e:
        print(e, file=sys.stderr)
        return 1
    if args.tiny:
        return tiny(args.out or TINY_OUT)
    return scripted(args.out or OUT)


if __name__ == "__main__":
    sys.exit(main())
