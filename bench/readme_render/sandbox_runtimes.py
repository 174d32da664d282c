"""README passage of bench/pipeline/reward_sandbox_runtime.py: what the reward sandbox held on a real container runtime."""

from __future__ import annotations

from typing import Any

PROBES = (  # the self-check's probes, in words (trainer/rewards_sandbox/self_check.py)
    ("score", "a reward call scored"),
    ("environ_secrets", "processes whose environment held the trainer's secret, read"),
    ("socket_reimported", "a socket by Python's re-imported module"),
    ("socket_ctypes", "a socket through ctypes"),
    ("socket_subprocess", "a socket from a subprocess"),
    ("kill_bystander", "SIGKILL to a bystander of the same user"),
    ("signal_trainer", "a signal to the trainer"),
    ("trainer_files", "the trainer's open files and memory, opened"),
    ("write_outside", "a file written outside the worker's directory"),
)


def _got(call: dict[str, Any]) -> str:
    if call["outcome"] == "ok":
        return f"returned {call['scores']}"
    return f"{call['outcome']}: {(call['error'] or '').split(':', 1)[0]}"


def _listener(probe: dict[str, Any]) -> str:
    if probe["listener_error"]:  # the TPU machine refuses every internet socket, loopback too
        return f"no loopback listener could be opened there ({probe['listener_error']})"
    return f"connections to a loopback listener {probe['connections_reached_listener']}"


def _routes(probe: dict[str, Any]) -> str:
    """The self-check's calls on another process (reach_probes.py), each against a decoy of the same user, by answer."""
    routes = probe.get("routes") or {}
    if not routes:
        return ""
    by_answer: dict[str, list[str]] = {}
    for name, route in sorted(routes.items()):
        by_answer.setdefault(str(route["answer"]), []).append(f"`{name}`" + ("" if route["held"] else " (**not held**)"))
    held = sum(route["held"] for route in routes.values())
    decoys = "every decoy alive" if all(route["decoy_alive"] for route in routes.values()) else "**a decoy died**"
    answers = "; ".join(f"{answer}: {', '.join(names)}" for answer, names in sorted(by_answer.items()))
    return f"\n\nCalls on another process, {len(routes)} tried, {held} held, {decoys}: {answers}."


def _verdict(probe: dict[str, Any]) -> str:
    verdict = probe.get("verdict") or {}
    if not verdict:
        return ""
    files = probe["isolation"].get("file_routes") or {}
    words = [f"{claim}: {'held' if ok else '**not held**'}" for claim, ok in verdict.get("required", {}).items()]
    words += [
        f"{claim}: {'held' if ok else 'not held (reported, not required on this runtime)'}"
        for claim, ok in verdict.get("reported", {}).items()
    ]
    tried = ", ".join(f"{route.replace('_', ' ')} {outcome}" for route, outcome in sorted(files.items()))
    trainer = f" The trainer's files, tried: {tried}." if files else ""
    return f"\n\nWhat sandbox-check says here: {'; '.join(words)}.{trainer}"


def _behind(run: dict[str, Any]) -> str:
    return ", the workers behind the reward container's server" if run.get("reward_container") else ""


def render_sandbox_runtimes(result: dict[str, Any]) -> str:
    parts = []
    for run in result["runs"]:
        probe, isolation = run["probe"], run["probe"]["isolation"]
        landlock = f"ABI {isolation['landlock_abi']}" if isolation["filesystem_confined"] else f"none: {isolation['landlock_refused']}"
        layers = (
            f"namespaces {isolation['namespaces'] or 'none'} ({isolation['refused'] or 'none refused'}); "
            f"seccomp {'installed' if isolation['seccomp'] else 'refused: ' + isolation['seccomp_refused']}; "
            f"Landlock {landlock}; "
            f"capabilities {'dropped' if isolation['capabilities_dropped'] else 'kept'}"
        )
        rows = "\n".join(f"| {words} | {_got(probe['results'][name])} |" for name, words in PROBES)
        parts.append(
            f"{run['machine']} ({run['runtime']}{_behind(run)}, kernel {run['kernel']}, uid {run['uid']}, Python {run['python']}; "
            f"commit `{run['commit']}`, sandbox digest `{run['sandbox_digest']}`, {run['measured_at']}): {layers}. "
            f"Seen from outside: bystander alive {probe['bystander_alive']}, {_listener(probe)}, "
            f"file outside written {probe['outside_file_written']}, workers replaced {probe['workers_replaced']}.\n\n"
            f"| the reward tried | it got |\n|---|---|\n{rows}" + _routes(probe) + _verdict(probe)
        )
    return "\n\n".join(parts)


def render_reward_container_cost(result: dict[str, Any]) -> str:
    """bench/pipeline/reward_container_cost.py: a call through the reward container's server against the trainer's own worker."""
    latency, machine, memory = result["latency"], result["machine"], result["reward_container_memory"]
    low, high = result["median_ratio_ci95"]
    side = {"in_process": "the trainer's own worker", "reward_container": "the reward container's"}
    calls = "; ".join(f"{side[name]}: median {v['median_ms']:.3f} ms, 95th percentile {v['p95_ms']:.3f} ms" for name, v in latency.items())
    calls = calls[0].upper() + calls[1:]
    added = latency["reward_container"]["median_ms"] - latency["in_process"]["median_ms"]
    who = "as root, the server under the gVisor emulation as uid 65534" if result["as_root"] else "as one user"
    return (
        f"{result['calls_per_side']} calls a side, alternating, each scoring {result['batch']['completions']} completions "
        f"of {result['batch']['characters_each']} characters with a regular-expression reward ({who}; "
        f"{machine['cpu_count']} cores, load {machine['load_average'][0]:.2f} at the start, commit `{machine['commit']}`). "
        f"{calls}. The reward container's median is {result['median_ratio']:.2f} times the trainer's own worker's "
        f"(95% bootstrap interval [{low:.2f}, {high:.2f}]), {added:+.3f} ms a call at the median. The first "
        f"worker started in {result['worker_started_s']['reward_container']:.2f} s there against "
        f"{result['worker_started_s']['in_process']:.2f} s. The server held {memory['server_mib']:.0f} MiB, "
        f"{memory['with_workers_mib']:.0f} MiB with its worker ({memory['processes']} processes), beside the "
        f"{memory['requested_for_server_mib']} MiB its container requests for the server on top of its workers' bounds."
    )
