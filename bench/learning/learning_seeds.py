"""The pre-registered seeds bench (issue 53 section 4): rljob against TRL on a matched objective, three seeds each.

The folds bench (bench/learning/learning_folds.py) trained each arm once, so its intervals are over rows and leave out how
much another training run would differ. Here each arm is trained once per seed on fold A and evaluated on fold B
(the folds bench's split, checked against its registered hashes):

- `base`: not trained; one eval job on fold B (the evaluation's sampling seed is fixed, so a second would repeat it);
- `rljob`: the folds bench's trained/A job with `grpo.kl_direction` set to TRL's KL gradient and the spec's `seed`
  set to s (data order and each rollout's key, trainer/rollout/rollout_keys.py), over REST to `rljob serve`;
- `peer_trl`: bench/learning/peer_trl.py (TRL's GRPOTrainer) with `--seed s` (TRL's data order and sampling), alone on the
  machine; TRL's version and its whole resolved GRPOConfig are recorded.

Every model is evaluated by the folds bench's evaluation path (eval jobs through the same `rljob serve`,
bench/learning/learning_folds_evals.py). bench/learning/learning_seeds_stats.py applies the rule in
bench/preregistration/learning_seeds.json, committed before any job.

    python bench/learning/learning_seeds.py base
    python bench/learning/learning_seeds.py arm rljob --seed 1 --seed 2 --seed 3      # two jobs at a time (local launcher)
    python bench/learning/learning_seeds.py arm peer_trl --seed 1 --seed 2 --seed 3   # one TRL run at a time
    python bench/learning/learning_seeds.py summary
    python bench/learning/learning_seeds.py specs                                      # the rljob specs' hashes

Each run adds to bench/results/learning_seeds.json as soon as it ends; a run already recorded is not rerun unless
`--rerun REASON` says why (the registration's rerun policy); a run trained but not yet evaluated is only evaluated.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.learning import learning_folds as folds_bench  # noqa: E402
from bench.learning import learning_folds_evals, peer_trl  # noqa: E402
from bench.learning import learning_seeds_stats as seeds_stats  # noqa: E402
from bench.learning.learning import sample_stats  # noqa: E402
from bench.learning.registered_spec import as_registered, spec_sha256  # noqa: E402
from bench.learning.shared_stream import fold_stream  # noqa: E402
from bench.result_meta import machine_facts  # noqa: E402
from trainer.contract import JobSpec  # noqa: E402

PREREGISTRATION = seeds_stats.PREREGISTRATION
RESULT = REPO / "bench" / "results" / "learning_seeds.json"
# Apart from the folds bench's directory: its own service store, fold files and runs.
WORK = Path(os.environ.get("RLJOB_SEEDS_WORK", "/tmp/rljob-learning-seeds"))
TRAIN_FOLD, EVAL_FOLD = "A", "B"
# What the training and evaluation of any arm run through; each run records their git objects at its commit.
CODE_PATHS = (
    "trainer",
    "service",
    "examples",
    "bench/learning/arith_folds.py",
    "bench/learning/learning.py",
    "bench/learning/learning_folds.py",
    "bench/learning/learning_folds_evals.py",
    "bench/learning/peer_trl.py",
    "bench/learning/rewards",
    "bench/learning/learning_seeds.py",
    "bench/learning/learning_seeds_stats.py",
    "bench/learning/shared_stream.py",
)
TRL_PACKAGES = ("trl", "transformers", "torch", "accelerate", "datasets")


def use_registration(name: str) -> None:
    """Run under another registration in bench/preregistration/ (its `result` file and `work` directory): the same
    runner serves the seeds bench (learning_seeds.json) and its redo on a shared data stream (issue 66 §4)."""
    global PREREGISTRATION, RESULT, WORK
    PREREGISTRATION = PREREGISTRATION.with_name(f"{name}.json")
    pre = settings()
    RESULT = REPO / "bench" / "results" / pre.get("result", "learning_seeds.json")
    WORK = Path(os.environ.get("RLJOB_SEEDS_WORK", pre.get("work", str(WORK))))


def settings() -> dict:
    return json.loads(PREREGISTRATION.read_text())


def load() -> dict:
    return json.loads(RESULT.read_text()) if RESULT.exists() else {}


def save(results: dict) -> None:
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(results, indent=1) + "\n")


def use_work_dir(work: Path | None = None) -> None:
    """The folds bench's helpers (model_dir, fold_dirs, job_spec, rljob_service, evaluate) read their module's WORK
    when called: point them at this bench's directory."""
    work = work or WORK
    work.mkdir(parents=True, exist_ok=True)
    folds_bench.WORK = work


def _git(*args: str) -> str:
    # rstrip: a porcelain line starts with a space where the index is clean
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.rstrip()


def code_state() -> dict:
    """The commit, the registration's commit, the git object of every CODE_PATHS entry at the commit (two runs ran
    the same committed code where these agree) and the files there that differ from it (edited or untracked)."""
    added = _git("log", "--diff-filter=A", "--format=%H", "--", str(PREREGISTRATION.relative_to(REPO))).splitlines()
    return {
        "commit": _git("rev-parse", "HEAD"),
        "registered_commit": added[-1] if added else None,
        "objects": {p: _git("rev-parse", f"HEAD:{p}") for p in CODE_PATHS},
        "uncommitted": _git("status", "--porcelain", "--untracked-files=all", "--", *CODE_PATHS).splitlines(),
    }


def pinned_code_problem(pre: dict, code: dict) -> str | None:
    """With `pinned_code` registered: every run uses the committed code of the registration's own commit under
    CODE_PATHS (a checkout of that commit, e.g. a git worktree, while main moves on); what differs, else None."""
    if not pre.get("pinned_code"):
        return None
    registered = code["registered_commit"]
    if registered is None:
        return "the registration is not committed yet: commit it, then run from a checkout of that commit"
    differ = [p for p in CODE_PATHS if code["objects"][p] != _git("rev-parse", f"{registered}:{p}")]
    if differ or code["uncommitted"]:
        return (
            f"this checkout's code differs from the registration's commit {registered[:10]} under {differ or code['uncommitted']}: "
            f"run from a checkout of it (git worktree add /work/pinned {registered[:10]})"
        )
    return None


def where(accelerator: str = "cpu") -> dict:
    return {"host": platform.node(), "machine": platform.machine(), "cpu_count": os.cpu_count(), "accelerator": accelerator}


def grpo_settings(pre: dict) -> dict:
    return {**pre["grpo"], "num_batches": pre["steps"]}


def fold_dirs() -> dict[str, dict]:
    """The folds bench's fold directories, rebuilt under this bench's WORK and checked against its registration."""
    folds_pre = json.loads(folds_bench.PREREGISTRATION.read_text())
    recorded = {
        f: {"train_hash": h, "control_reward_sha256": folds_pre["control_reward_sha256"]} for f, h in folds_pre["fold_hashes"].items()
    }
    return folds_bench.fold_dirs({"base_sampled_rate": folds_pre["base"]["sampled_strict_rate"], "folds": recorded})


def rljob_spec(pre: dict, folds: dict, seed: int, accelerator: str = "cpu") -> dict:
    """Seed s's rljob job: the folds bench's trained/A spec with the registered grpo settings (kl_direction among
    them) and the job's seed; on the chip only `hardware` differs."""
    spec = folds_bench.job_spec("trained", TRAIN_FOLD, folds, grpo_settings(pre))
    spec["name"] = f"seeds-rljob-{TRAIN_FOLD.lower()}-s{seed}"
    spec["seed"] = seed
    if accelerator != "cpu":
        spec["hardware"].update(accelerator=accelerator, chips_per_vm=1)
    JobSpec.model_validate(spec)  # refused here, not minutes later by the service
    return spec


def registered_shape() -> dict | None:
    """The fields the registered hashes were taken over: the spec as the registration's first rljob run recorded it
    (its repro.spec, whose fields are the full dump's at that commit). None before any run."""
    runs = load().get("runs", {}).get("rljob", {})
    return runs[min(runs, key=int)]["repro"]["spec"] if runs else None


def registered_sha256(spec: dict) -> str:
    """spec_sha256 of the spec in its registered form: what the registration's job_spec_sha256 compares with."""
    return spec_sha256(as_registered(spec, registered_shape()))


def trl_resolved(pre: dict, seed: int, out: Path) -> dict:
    """TRL's versions and its whole GRPOConfig as peer_trl.py builds it for this seed (same function, same
    arguments, same interpreter), checked against the registered KL direction and seed."""
    config = peer_trl.trl_config(grpo_settings(pre), pre["steps"], out, seed).to_dict()
    config = json.loads(json.dumps(config, default=str))
    wanted = pre["arms"]["peer_trl"]["requires"]
    found = {k: config.get(k) for k in wanted} | {"seed": config.get("seed")}
    if found != {**wanted, "seed": seed}:
        raise SystemExit(f"TRL's resolved config is not the registered one: {found} vs {wanted} and seed {seed}")

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"versions": {name: installed(name) for name in TRL_PACKAGES}, "config": config}


def peer_command(pre: dict, folds: dict, seed: int, out: Path, stream: Path | None = None) -> list[str]:
    """`stream`: the rows file in rljob's order for this seed, trained on unshuffled (a shared data stream)."""
    # learning_folds.run_peer runs both folds at once and has no seed; this bench runs fold A once per seed.
    d = Path(folds[TRAIN_FOLD]["dir"])
    train = stream or d / "train.jsonl"
    return [
        sys.executable,
        str(REPO / "bench" / "learning" / "peer_trl.py"),
        *("--model", str(folds_bench.WORK / "smollm2"), "--train", str(train), "--template", str(d / "arith-one-shot.json")),
        *("--rewards", str(d / "arith_correct.py"), "--function", "arith_correct", "--spec-json", json.dumps(grpo_settings(pre))),
        *("--steps", str(pre["steps"]), "--seed", str(seed), "--out", str(out)),
        *(["--no-shuffle"] if stream else []),
    ]


def run_peer(pre: dict, folds: dict, seed: int) -> dict:
    """One TRL run, alone on the machine (all its cores), and its per-step log as the folds bench records it."""
    out = folds_bench.WORK / "peer_trl" / f"s{seed}"
    out.mkdir(parents=True, exist_ok=True)
    resolved = trl_resolved(pre, seed, out)
    stream_file, expected = None, None
    if pre.get("data_stream") == "shared":
        fold = Path(folds[TRAIN_FOLD]["dir"])
        rows, expected = fold_stream(fold, folds_bench.WORK / "smollm2", rljob_spec(pre, folds, seed))
        stream_file = out / "train-stream.jsonl"
        stream_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = peer_command(pre, folds, seed, out, stream_file)
    with (out / "log.txt").open("wb") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=folds_bench.env(), cwd=REPO, check=False).returncode
    metrics = json.loads((out / "metrics.json").read_text()) if rc == 0 else {}
    stream = None
    if expected is not None and rc == 0:
        seen = metrics.get("step_prompts") or []
        stream = {"steps": len(expected), "matching": sum(a == b for a, b in zip(seen, expected, strict=False)), "reported": len(seen)}
    train = [
        {
            "step": e["step"],
            "reward_mean": e.get("reward"),
            "kl": e.get("kl"),
            "loss": e.get("loss"),
            "mean_length": e.get("completions/mean_length"),
            "signal_fraction": 1 - e.get("frac_reward_zero_std", 1),
        }
        for e in metrics.get("log", [])
        if "reward" in e
    ]
    phase = "SUCCEEDED" if rc == 0 else f"exit {rc}"
    if stream is not None and not (stream["matching"] == stream["steps"] == stream["reported"]):
        phase = "stream differs"  # TRL did not train on rljob's stream: not this bench's arm, so not evaluated
    return {
        "phase": phase,
        "stream": stream,
        "command": cmd,
        "trl": resolved,
        "train": train,
        "train_seconds": metrics.get("train_seconds"),
        "export": str(out / "export") if phase == "SUCCEEDED" else None,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def pending(results: dict, arm: str, seeds: list[int], rerun: str | None) -> list[int]:
    """The seeds still to train; with `rerun`, recorded runs of these seeds move to `reruns` with the reason."""
    runs = results.setdefault("runs", {}).setdefault(arm, {})
    if rerun:
        for s in seeds:
            if str(s) in runs:
                results.setdefault("reruns", []).append({"arm": arm, "seed": s, "reason": rerun, "replaced": runs.pop(str(s))})
    return [s for s in seeds if str(s) not in runs]


def record_run(results: dict, arm: str, seed: int, run: dict) -> None:
    results["runs"][arm][str(seed)] = run
    save(results)
    print(f"[{arm} seed {seed}] {run['train']['phase']}, train_seconds={run['train'].get('train_seconds')}", flush=True)


def train_rljob(pre: dict, results: dict, seeds: list[int], accelerator: str, accept_spec_change: bool) -> None:
    folds = fold_dirs()
    specs, hashes = {}, {}
    for s in seeds:
        specs[str(s)] = rljob_spec(pre, folds, s, accelerator)
        hashes[s] = (registered_sha256(specs[str(s)]), pre["arms"]["rljob"]["job_spec_sha256"].get(str(s)))
        if hashes[s][0] != hashes[s][1] and accelerator == "cpu" and not accept_spec_change:
            raise SystemExit(
                f"seed {s}'s spec hashes {hashes[s][0]}, its registered one {hashes[s][1]} (see `specs`; --accept-spec-change)"
            )
    folds_bench.model_dir(folds_bench.env())
    facts, code = machine_facts(), code_state()

    def on_result(name: str, result: dict) -> None:
        run_dir = Path(result.get("run_uri") or "/nonexistent")
        if (run_dir / "samples").is_dir():
            result["samples"] = sample_stats(run_dir)
        repro = json.loads((run_dir / "repro.json").read_text()) if (run_dir / "repro.json").is_file() else None
        sha, registered = hashes[int(name)]
        run = {"train": result, "repro": repro, "spec_sha256": sha, "registered_spec_sha256": registered}
        ran_on = repro["hardware"]["accelerator"] if repro else accelerator
        record_run(results, "rljob", int(name), {**run, "where": where(ran_on), "machine": facts, "code": code})

    with folds_bench.rljob_service() as (client, token):
        folds_bench.run_jobs(client, token, specs, on_result)


def train_peer(pre: dict, results: dict, seeds: list[int]) -> None:
    folds = fold_dirs()
    folds_bench.model_dir(folds_bench.env())
    for s in seeds:  # one at a time: each TRL run has the machine to itself, as registered
        facts, code = machine_facts(), code_state()
        train = run_peer(pre, folds, s)
        record_run(results, "peer_trl", s, {"train": train, "where": where(), "machine": facts, "code": code})


def evaluate_runs(pre: dict, results: dict, arm: str, seeds: list[int]) -> None:
    """Each trained run of these seeds not yet evaluated: an eval job on fold B, recorded as it ends."""
    runs = results["runs"][arm]
    todo = [s for s in seeds if str(s) in runs and "rows" not in runs[str(s)] and runs[str(s)]["train"].get("export")]
    for s in seeds:
        if str(s) in runs and not runs[str(s)]["train"].get("export"):
            print(f"[{arm} seed {s}] ended {runs[str(s)]['train']['phase']}: nothing to evaluate (the rerun policy applies)", flush=True)
    if not todo:
        return
    with folds_bench.rljob_service() as (client, token):
        for s in todo:
            run = runs[str(s)]
            # checkpoints() names a trained job's weights `<job-id>:export` and the TRL export its directory.
            kind = "peer_trl" if arm == "peer_trl" else "trained"
            checkpoint = learning_folds_evals.checkpoints(kind, arms={TRAIN_FOLD: run["train"]})[EVAL_FOLD]
            facts = machine_facts()
            model = folds_bench.evaluate(client, token, f"seeds-{arm.replace('_', '-')}-s{s}", {EVAL_FOLD: checkpoint}, pre, facts)
            run.update(model, evaluation_machine=facts, evaluation_code=code_state(), evaluation_where=where())
            save(results)


def run_base(pre: dict, rerun: str | None) -> None:
    refuse_unpinned(pre)
    results = load()
    if "base" in results and not rerun:
        print("base is recorded; --rerun REASON to measure it again")
        return
    if rerun and "base" in results:
        results.setdefault("reruns", []).append({"arm": "base", "reason": rerun, "replaced": results.pop("base")})
    facts, code = machine_facts(), code_state()
    model = folds_bench.model_dir(folds_bench.env())
    with folds_bench.rljob_service() as (client, token):
        base = folds_bench.evaluate(client, token, "seeds-base", {EVAL_FOLD: str(model)}, pre, facts)
    results["base"] = {**base, "where": where(), "machine": facts, "code": code}
    save(results)


def refuse_unpinned(pre: dict) -> None:
    problem = pinned_code_problem(pre, code_state())
    if problem:
        raise SystemExit(problem)


def run_arm(pre: dict, arm: str, seeds: list[int], rerun: str | None, accelerator: str, accept_spec_change: bool) -> None:
    refuse_unpinned(pre)
    unregistered = sorted(set(seeds) - set(pre["seeds"]))
    if unregistered:
        print(f"seeds {unregistered} are not registered: their runs are exploratory", flush=True)
    results = load()
    todo = pending(results, arm, seeds, rerun)
    if todo and arm == "rljob":
        train_rljob(pre, results, todo, accelerator, accept_spec_change)
    elif todo:
        train_peer(pre, results, todo)
    evaluate_runs(pre, results, arm, seeds)


def summary(pre: dict) -> None:
    results = load()
    results["summary"] = seeds_stats.summarize(results, pre["seeds"])
    results["code_objects_differ"] = code_differences(results)
    save(results)
    seeds_stats.print_summary(results["summary"])
    if results["code_objects_differ"]:
        print(f"  runs differ in committed code under: {', '.join(results['code_objects_differ'])}")


def code_differences(results: dict) -> list[str]:
    """The CODE_PATHS entries whose git objects differ between any two recorded runs (base included)."""
    runs = [r for arm in results.get("runs", {}).values() for r in arm.values()]
    states = [r["code"] for r in runs] + [r["evaluation_code"] for r in runs if "evaluation_code" in r]
    states += [results["base"]["code"]] if "base" in results else []
    return [p for p in CODE_PATHS if len({s["objects"].get(p) for s in states}) > 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["base", "arm", "summary", "specs"])
    parser.add_argument("arm", nargs="?", choices=seeds_stats.ARMS)
    parser.add_argument("--seed", type=int, action="append", help="repeat for several; default: the registered seeds")
    parser.add_argument("--rerun", metavar="REASON", help="rerun recorded runs, for a reason outside the experiment")
    parser.add_argument("--accelerator", default="cpu", help="rljob only: train on this accelerator (v5e-1: the TPU chip)")
    parser.add_argument("--accept-spec-change", action="store_true", help="run an rljob spec whose hash differs from the registered one")
    parser.add_argument(
        "--registration", default="learning_seeds", help="bench/preregistration/NAME.json (learning_shared_stream: issue 66's redo)"
    )
    args = parser.parse_args()
    use_registration(args.registration)
    pre = settings()
    use_work_dir()
    if args.what == "base":
        run_base(pre, args.rerun)
    elif args.what == "arm":
        if not args.arm:
            parser.error("arm needs rljob or peer_trl")
        run_arm(pre, args.arm, args.seed or pre["seeds"], args.rerun, args.accelerator, args.accept_spec_change)
    elif args.what == "specs":
        folds = fold_dirs()
        for s in args.seed or pre["seeds"]:
            print(f"seed {s}: {registered_sha256(rljob_spec(pre, folds, s, args.accelerator))}")
        return 0
    summary(pre)
    return 0


if __name__ == "__main__":
    sys.exit(main())
