"""What the reward container costs per call against the trainer's own workers, on this machine.

    .venv/bin/python bench/pipeline/reward_container_cost.py [--calls 400]

Two pools of one worker each over the same reward file: the in-process pool (the trainer starts its worker) and the
pool of a reward container's server (trainer/rewards_sandbox/host.py, started here as a pod's sidecar would run it:
under the gVisor emulation and, as root, another uid: harness/runtime_emulation.py). Calls alternate between the two,
so both meet the same machine load; each call scores a GSM8K-sized batch (16 completions of ~400 characters) with a
regular-expression reward. Reported: each side's call latency (median, 95th percentile) and the ratio of medians with
a bootstrap interval; the time to the first worker; and the reward container's memory beside what
service/adapters/k8s/reward_container.py requests for its server (REWARD_HOST_OVERHEAD_MIB). Writes
bench/results/reward_container_cost.json (rendered in bench/pipeline/README.md).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.result_meta import machine_facts, write_result  # noqa: E402
from trainer.contract.spec.reward_sandbox import REWARD_HOST_OVERHEAD_MIB  # noqa: E402
from trainer.rewards_sandbox.pool import RewardSandboxPool, SandboxLimits  # noqa: E402

REWARD = """
import re

ANSWER = re.compile(r"####\\s*(-?[0-9][0-9,]*)")

def final_number(prompts, completions, answer=None, **kwargs):
    out = []
    for completion, expected in zip(completions, answer or [None] * len(completions)):
        found = ANSWER.findall(completion)
        out.append(1.0 if found and found[-1].replace(",", "") == str(expected) else 0.0)
    return out
"""


def batch(rng: random.Random) -> dict[str, Any]:
    words = "the farmer sells eggs at a market each day and counts what is left over after breakfast".split()
    completions, answers = [], []
    for _ in range(16):
        text = " ".join(rng.choice(words) for _ in range(70))
        value = rng.randint(1, 500)
        completions.append(f"{text} #### {value if rng.random() < 0.5 else value + 1}")
        answers.append(value)
    return {"prompts": ["How many eggs?"] * 16, "completions": completions, "answer": answers}


def start_host(socket_path: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "harness.runtime_emulation", "--runtime", "gvisor"]
    command += ["--uid", "65534"] if os.getuid() == 0 else []
    command += ["--", sys.executable, "-m", "trainer.rewards_sandbox.host", "--socket", socket_path]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(command, cwd=REPO, env=env)


def tree_rss_mib(pid: int) -> dict[str, float]:
    import psutil

    root = psutil.Process(pid)
    children = root.children(recursive=True)
    return {
        "server_mib": round(root.memory_info().rss / 2**20, 1),
        "with_workers_mib": round(sum(p.memory_info().rss for p in [root, *children]) / 2**20, 1),
        "processes": 1 + len(children),
    }


def bootstrap_ratio(a: list[float], b: list[float], rng: random.Random, draws: int = 2000) -> list[float]:
    ratios = sorted(statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b))) for _ in range(draws))
    return [round(ratios[int(0.025 * draws)], 3), round(ratios[int(0.975 * draws)], 3)]


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per side")
    args = parser.parse_args()
    facts = machine_facts()
    shared = tempfile.mkdtemp(prefix="rljob-reward-share-")
    os.chmod(shared, 0o777)
    socket_path = os.path.join(shared, "host.sock")
    work = Path(tempfile.mkdtemp(prefix="rljob-reward-cost-"))
    (work / "rewards.py").write_text(REWARD)
    host = start_host(socket_path)
    limits = SandboxLimits(timeout_s=30, start_timeout_s=60)
    sides: dict[str, RewardSandboxPool] = {}
    started_s: dict[str, float] = {}
    try:
        for name, socket in (("in_process", None), ("reward_container", socket_path)):
            began = time.perf_counter()
            pool = RewardSandboxPool(str(work / "rewards.py"), ["final_number"], limits, size=1, host=socket)
            pool.start()
            started_s[name] = round(time.perf_counter() - began, 3)
            sides[name] = pool
        rng = random.Random(20261206)
        latencies: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.calls):
            kwargs = batch(rng)
            for name in rng.sample(sorted(sides), 2):  # alternate, in a random order each round
                began = time.perf_counter()
                result = sides[name].call("final_number", kwargs)
                latencies[name].append(time.perf_counter() - began)
                assert result.scores is not None and len(result.scores) == 16, result
        memory = tree_rss_mib(host.pid)
    finally:
        for pool in sides.values():
            pool.close()
        host.send_signal(signal.SIGTERM)
        host.wait(timeout=10)
    report = {
        "calls_per_side": args.calls,
        "batch": {"completions": 16, "characters_each": "about 400"},
        "worker_started_s": started_s,
        "latency": {name: summary(values) for name, values in latencies.items()},
        "median_ratio": round(statistics.median(latencies["reward_container"]) / statistics.median(latencies["in_process"]), 3),
        "median_ratio_ci95": bootstrap_ratio(latencies["reward_container"], latencies["in_process"], random.Random(1)),
        "reward_container_memory": {**memory, "requested_for_server_mib": REWARD_HOST_OVERHEAD_MIB},
        "as_root": os.getuid() == 0,
    }
    write_result("reward_container_cost.json", report, facts)


if __name__ == "__main__":
    main()
