"""README passage of bench/reward_sandbox_runtime.py: what the reward sandbox held on a real container runtime."""

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
            f"| the reward tried | it got |\n|---|---|\n{rows}"
        )
    return "\n\n".join(parts)
