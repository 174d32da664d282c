"""bench/chip/tpu_job.py's collect and bench/chip/tpu_job_stats.py's rule: the committed result is what collecting the committed
call records gives, and the registered rule says what its pre-registration says it says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.chip import tpu_job, tpu_job_collect, tpu_job_inputs
from bench.chip.tpu_job_stats import cost_per_point, cost_summary, decide, registered_seeds

RESULTS = Path(tpu_job.__file__).resolve().parents[1] / "results"


def _run(arm: str, seed: int, sampled: float, chip_hours: float = 0.05) -> dict:
    scores = {"sampled": {"value": sampled, "ci95": [sampled - 0.05, sampled + 0.05]}}
    return {
        "arm": arm,
        "seed": seed,
        "phase": "SUCCEEDED",
        "chip_hours": chip_hours,
        "cost_usd": chip_hours * 1.2,
        "export_eval": {"scores": scores},
    }


def _result(trained: dict[int, float], control: dict[int, float], base: float = 0.15) -> dict:
    runs = {f"trained/{s}": _run("trained", s, v) for s, v in trained.items()}
    runs |= {f"control/{s}": _run("control", s, v) for s, v in control.items()}
    return {"runs": runs, "base": {"scores": {"sampled": {"value": base, "ci95": [0.1, 0.2]}}}}


def test_the_rule_decides_only_with_every_registered_seed_and_pairs_by_seed():
    seeds = registered_seeds()
    assert seeds == [1, 2, 3, 4, 5]
    ahead = decide(_result({s: 0.40 + 0.01 * s for s in seeds}, {s: 0.15 + 0.01 * s for s in seeds}))
    assert ahead["complete"] and ahead["vs_control"]["verdict"] == "learned beyond the control"
    assert ahead["vs_control"]["mean"] == pytest.approx(0.25) and ahead["vs_control"]["sd"] == pytest.approx(0.0, abs=1e-12)
    assert ahead["vs_base"]["verdict"] == "better than base"
    tied = decide(_result({s: 0.30 + (0.1 if s % 2 else -0.1) for s in seeds}, {s: 0.30 for s in seeds}))
    assert tied["vs_control"]["verdict"] == "cannot tell at this many seeds"
    behind = decide(_result({s: 0.10 + 0.01 * s for s in seeds}, {s: 0.20 + 0.01 * s for s in seeds}))
    assert behind["vs_control"]["verdict"] == "no better than the control"
    partial = decide(_result({1: 0.4, 2: 0.45}, {1: 0.15, 2: 0.2}))
    assert not partial["complete"] and partial["vs_control"]["verdict"].startswith("incomplete")
    assert partial["evaluated_pairs"] == [1, 2]
    # A control of another seed is no pair: seed 3's trained run alone adds nothing to vs_control.
    unpaired = decide(_result({1: 0.4, 3: 0.5}, {1: 0.15, 2: 0.2}))
    assert unpaired["evaluated_pairs"] == [1] and unpaired["vs_control"]["n"] == 1


def test_cost_per_point_divides_the_training_jobs_chip_time_by_the_points_gained():
    (row,) = cost_per_point(_result({1: 0.25}, {}, base=0.15))
    assert row["points"] == pytest.approx(10.0) and row["chip_s"] == pytest.approx(180.0)
    assert row["chip_s_per_point"] == pytest.approx(18.0) and row["usd_per_point"] == pytest.approx(0.006)
    (lost,) = cost_per_point(_result({1: 0.10}, {}, base=0.15))
    assert lost["chip_s_per_point"] is None
    seeds = registered_seeds()
    gained = cost_summary(_result({s: 0.25 + 0.01 * s for s in seeds}, {s: 0.15 for s in seeds}, base=0.15))
    assert gained["established"] and gained["points"] == pytest.approx(13.0)
    assert gained["chip_s_per_point"] == pytest.approx(180.0 / 13.0)
    unsure = cost_summary(_result({s: 0.15 + (0.1 if s % 2 else -0.1) for s in seeds}, {}, base=0.15))
    assert unsure == {"established": False, "why": "no gain established", "runs": 5}
    control = decide(_result({1: 0.3}, {1: 0.25, 2: 0.35}, base=0.15))["control_vs_base"]
    assert control["n"] == 2 and control["mean"] == pytest.approx(0.15)


@pytest.mark.parametrize("task", sorted(tpu_job_inputs.TASKS))
def test_the_committed_result_is_what_its_call_records_collect_to(task, tmp_path, monkeypatch):
    facts = tpu_job_inputs.TASKS[task]
    records = sorted(RESULTS.glob(f"{facts['records']}*[0-9].json"))
    if not records:  # a task no chip call has run yet has neither records nor a result
        assert not (RESULTS / facts["result"]).exists(), f"{facts['result']} has no call record beside it"
        return
    for record in records:
        shutil.copy(record, tmp_path)
        if (log := record.with_suffix(".service.log")).exists():
            shutil.copy(log, tmp_path)
    monkeypatch.setattr(tpu_job_inputs, "RESULTS", tmp_path)
    assert json.loads(tpu_job_collect.recollect(task).read_text()) == json.loads((RESULTS / facts["result"]).read_text())


def _call_dir(tmp_path: Path, record: Path) -> Path:
    call = tmp_path / record.stem
    call.mkdir(exist_ok=True)
    shutil.copy(record, call / tpu_job_collect.RECORD)
    return call


def test_a_run_is_replaced_only_when_the_rerun_policy_allows_it(tmp_path, monkeypatch):
    """Call 1's seed-1 pair ended with its export evals QUEUED, call 5's control/4 with its export eval RUNNING (the
    call's time was up): rerun, kept with that reason.
    A pair whose export evals ended may not be replaced, whatever its result."""
    monkeypatch.setattr(tpu_job_inputs, "RESULTS", tmp_path)
    records = sorted(RESULTS.glob("tpu_job-call-*[0-9].json"))
    for record in records:
        tpu_job_collect.collect(_call_dir(tmp_path, record))
    result = json.loads((tmp_path / "tpu_job.json").read_text())
    assert {r["job_id"]: r["reason"] for r in result["reruns"]} == {
        "rl-ciex53pi1jaz": "its export eval was QUEUED when its device call's time was up",
        "rl-9ib5ayitrd3b": "its export eval was QUEUED when its device call's time was up",
        "rl-rzowyzj09fev": "its export eval was RUNNING when its device call's time was up",
    }
    before = (tmp_path / "tpu_job.json").read_text()
    with pytest.raises(SystemExit, match="never one that ended"):
        tpu_job_collect.collect(_call_dir(tmp_path, records[-1]))
    assert (tmp_path / "tpu_job.json").read_text() == before


def test_each_device_call_is_told_with_its_own_jobs():
    from bench.readme_render.tpu_job import render_tpu_job

    result = json.loads((RESULTS / "tpu_job.json").read_text())
    calls = render_tpu_job(result).split("\n\n")
    first = next(c for c in calls if c.startswith("Device call 1 "))
    assert "rl-ciex53pi1jaz" in first and result["runs"]["trained/1"]["job_id"] not in first
    assert "trained/1 SUCCEEDED (base eval SUCCEEDED, export eval QUEUED)" in first


def test_a_continued_call_is_told_with_where_its_jobs_stood_at_its_end_and_only_what_ended_in_it():
    """A run's summary is its latest state: a call a later one continued says what its own record saw, and a job that
    ended in an earlier call is not told again."""
    from bench.readme_render.tpu_job import render_tpu_job

    result = json.loads((RESULTS / "tpu_job_gsm8k.json").read_text())
    calls = {c.split(" (")[0]: c for c in render_tpu_job(result).split("\n\n") if c.startswith("Device call ")}
    trained, control = result["runs"]["trained/2"]["job_id"], result["runs"]["control/2"]["job_id"]
    assert "trained/2 SUCCEEDED (export eval RUNNING); control/2 SUCCEEDED (export eval QUEUED)" in calls["Device call 3"]
    assert f"(`{trained}`) ended" in calls["Device call 3"] and f"(`{control}`) ended" in calls["Device call 3"]
    assert "control/2 SUCCEEDED (export eval RUNNING)" in calls["Device call 4"]
    assert f"(`{trained}`) ended" not in calls["Device call 4"] and "No job reached its end in this call." in calls["Device call 4"]


@pytest.mark.parametrize("task", sorted(tpu_job_inputs.TASKS))
def test_every_registered_job_is_a_valid_spec_and_a_control_waits_for_its_rate(task, tmp_path, monkeypatch):
    """The chip calls' specs pass the service's own model here, so no device time goes to a refused submit; a gsm8k
    control cannot be made before the base rate it is registered to use was measured."""
    from trainer.contract.spec.job import JobSpec

    monkeypatch.setattr(tpu_job_inputs, "INPUTS", tmp_path / "inputs")
    monkeypatch.setattr(tpu_job_inputs, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    monkeypatch.setattr(tpu_job_inputs, "commit_facts", lambda: {"commit": "0" * 40, "uncommitted": []})
    tpu_job_inputs.prepare(task)
    seeds = json.loads(tpu_job_inputs.registration_path(task).read_text())["seeds"]
    for seed in seeds:
        spec = JobSpec.model_validate(tpu_job_inputs.job_spec(tmp_path / "work", task, "trained", seed))
        assert spec.seed == seed and spec.hardware.accelerator == "v5e-1"
    if task == "arith":
        JobSpec.model_validate(tpu_job_inputs.job_spec(tmp_path / "work", task, "control", 1))
        return
    with pytest.raises(SystemExit, match="collect a call run with --base"):
        tpu_job_inputs.job_spec(tmp_path / "work", task, "control", 1)
    base = {"scores": {"sampled": {"value": 0.0375, "ci95": [0.02, 0.05]}}}
    (tmp_path / "results" / "tpu_job_gsm8k.json").write_text(json.dumps({"base": base}))
    tpu_job_inputs.prepare(task)
    control = tpu_job_inputs.job_spec(tmp_path / "work", task, "control", 1)
    JobSpec.model_validate(control)
    assert "RATE = 0.0375" in Path(control["grpo"]["rewards"]["functions_path"]).read_text()


def test_a_logits_precision_job_is_the_registered_job_but_its_logits_and_evals(tmp_path, monkeypatch):
    """`run --logits-dtype float32` submits the registered job of the seed (same data, same order, same settings) with
    only model.logits_dtype set and no eval jobs, named apart (tests/trainer/stages/test_logits_dtype.py: what MaxText
    reads of the field)."""
    from trainer.contract.spec.job import JobSpec

    monkeypatch.setattr(tpu_job_inputs, "INPUTS", tmp_path / "inputs")
    monkeypatch.setattr(tpu_job_inputs, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    monkeypatch.setattr(tpu_job_inputs, "commit_facts", lambda: {"commit": "0" * 40, "uncommitted": []})
    tpu_job_inputs.prepare("gsm8k")
    registered = tpu_job_inputs.job_spec(tmp_path / "work", "gsm8k", "trained", 4)
    variant = tpu_job_inputs.job_spec(tmp_path / "work", "gsm8k", "trained", 4, logits_dtype="float32")
    assert variant["name"] == registered["name"] + "-logits-float32" and "eval" not in variant
    assert variant["model"] == registered["model"] | {"logits_dtype": "float32"}
    same = {k: v for k, v in registered.items() if k not in ("name", "model", "eval")}
    assert {k: v for k, v in variant.items() if k not in ("name", "model")} == same
    spec = JobSpec.model_validate(variant)
    assert spec.model.logits_dtype == "float32"
    # `run --smoke --logits-dtype float32` tries the same flow on this machine's CPU (run makes the work folder)
    (tmp_path / "work").mkdir(exist_ok=True)
    smoke = JobSpec.model_validate(tpu_job_inputs.job_spec(tmp_path / "work", "gsm8k", "trained", 4, smoke=True, logits_dtype="float32"))
    assert (smoke.hardware.accelerator, smoke.model.logits_dtype, smoke.eval) == ("cpu", "float32", None)


def test_gsm8k_rows_are_the_registered_ones_and_the_suite_shares_no_question_with_training():
    train, suite = tpu_job_inputs.gsm8k_rows()
    hashes = json.loads(tpu_job_inputs.registration_path("gsm8k").read_text())["hashes"]
    assert (tpu_job_inputs.rows_hash(train), tpu_job_inputs.rows_hash(suite)) == (hashes["train_hash"], hashes["suite_hash"])
    asked = {" ".join(r["question"].lower().split()) for r in train}
    assert len(suite) == 300 and not asked & {" ".join(r["question"].lower().split()) for r in suite}


def _recorded(phase: str, export_phase: str | None, spec_hash: str = "s1", job_id: str = "rl-old") -> dict:
    export = {"phase": export_phase} if export_phase else None
    return {"arm": "trained", "seed": 4, "job_id": job_id, "phase": phase, "export_eval": export, "run_spec_sha256": spec_hash}


@pytest.mark.parametrize(
    ("old", "reruns", "new_hash", "refusal"),
    [
        (_recorded("RUNNING", None), [], "s1", None),  # the call's time ran out during training
        (_recorded("SUCCEEDED", "QUEUED"), [], "s1", None),  # ... before its export eval ran
        (_recorded("FAILED", None), [], "s1", "ended"),  # how a run ends is its result
        (_recorded("SUCCEEDED", "SUCCEEDED"), [], "s1", "ended"),
        (_recorded("RUNNING", None), [_recorded("RUNNING", None, job_id="rl-first")], "s1", "once"),
        (_recorded("RUNNING", None), [], "s2", "identical spec"),
    ],
)
def test_a_rerun_is_once_for_a_cut_short_run_with_the_identical_spec(old, reruns, new_hash, refusal):
    new = {**_recorded("SUCCEEDED", "SUCCEEDED", new_hash), "job_id": "rl-new"}
    if refusal is None:
        tpu_job_collect._check_rerun("trained/4", old, new, reruns)
    else:
        with pytest.raises(SystemExit, match=refusal):
            tpu_job_collect._check_rerun("trained/4", old, new, reruns)


def test_a_rerun_at_a_commit_whose_spec_gained_a_field_is_still_the_identical_spec():
    record = json.loads((tpu_job_inputs.RESULTS / "tpu_job_gsm8k-call-20261207T1343.json").read_text())
    spec = record["jobs"]["trained/5"]["view"]["spec"]  # as the service's view showed it on the chip
    spec["eval"]["base"] = True  # the call's first job only: not part of the run
    spec["grpo"]["kv_cache_buffer"] = 256  # its default
    before = json.loads(json.dumps(spec))
    del before["grpo"]["kv_cache_buffer"]  # as if the field were added after the first run
    before["eval"]["base"] = False
    old, new = _recorded("RUNNING", None, tpu_job_collect._run_spec_hash(before)), _recorded("SUCCEEDED", None, "")
    new["run_spec_sha256"] = tpu_job_collect._run_spec_hash(spec)
    tpu_job_collect._check_rerun("trained/4", old, new, [])
    spec["grpo"]["kv_cache_buffer"] = 128  # set: another spec
    new["run_spec_sha256"] = tpu_job_collect._run_spec_hash(spec)
    with pytest.raises(SystemExit, match="identical spec"):
        tpu_job_collect._check_rerun("trained/4", old, new, [])


def _continued_call(started: str, phase: str, base_phase: str, continues: str | None = None) -> dict:
    """A gsm8k call record of one job (trained/1) and its base eval, as `run` writes it."""
    score = {"value": 0.04, "ci95": [0.02, 0.06]}
    scores = {"gsm8k_final_number": dict.fromkeys(("pass@1", "sampled", "pass@k", "maj@k"), score)} if base_phase == "SUCCEEDED" else {}
    base = {"id": "rl-base", "phase": base_phase, "eval_job": {"primary": "gsm8k_final_number", "scores": scores}}
    view = {"phase": phase, "spec": {"seed": 1, "eval": {"base": True}}, "attached_evals": []}
    record = {
        "started": started,
        "task": "gsm8k",
        "calls": [],
        "jobs": {"trained/1": {"job_id": "rl-job", "view": view, "evals": {"base": base}}},
    }
    return record | ({"continues": continues} if continues else {})


@pytest.mark.parametrize("base_phase_first", ["RUNNING", "SUCCEEDED"])
def test_a_continued_call_reads_the_same_run_and_base_eval_later_not_as_a_rerun(base_phase_first, tmp_path, monkeypatch):
    """`run --continue` follows the job the call before submitted: collecting it updates that run and its base eval in
    place (the base eval read again is no repeat of it); a new job for the same arm and seed would be a rerun, once."""
    monkeypatch.setattr(tpu_job_inputs, "RESULTS", tmp_path)
    first = _continued_call("2026-12-06T23:00:00+00:00", "RUNNING", base_phase_first)
    later = _continued_call("2026-12-06T23:10:00+00:00", "SUCCEEDED", "SUCCEEDED", continues=first["started"])
    for index, record in enumerate((first, later)):
        call = tmp_path / f"call{index}"
        call.mkdir()
        (call / tpu_job_collect.RECORD).write_text(json.dumps(record))
        tpu_job_collect.collect(call)
    result = json.loads((tmp_path / "tpu_job_gsm8k.json").read_text())
    assert result["runs"]["trained/1"]["phase"] == "SUCCEEDED" and "reruns" not in result
    assert result["base"]["eval_id"] == "rl-base" and result["base"]["scores"] is not None and "base_repeats" not in result
    assert result["calls"][1]["continues"] == first["started"]


def test_continue_refuses_without_a_submitting_call_on_the_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("RLJOB_TPU_JOB_WORK", str(tmp_path / "work"))
    with pytest.raises(SystemExit, match="nothing to continue"):
        tpu_job.run(tmp_path / "out", "gsm8k", [], base=False, max_s=1, follow=True)
    assert not (tmp_path / "out").exists()


def test_a_call_keeps_each_jobs_events_and_lists_the_compilation_cache(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    for job_id in ("rl-job", "rl-eval"):
        (work / "runs" / job_id).mkdir(parents=True)
        (work / "runs" / job_id / "events.jsonl").write_text(f'{{"job_id": "{job_id}"}}\n')
    (work / "runs" / "_cache" / "jax").mkdir(parents=True)
    (work / "runs" / "_cache" / "jax" / "jit_step-abc-cache").write_bytes(b"x" * 7)
    record = {"jobs": {"trained/1": {"job_id": "rl-job", "evals": {"export": {"id": "rl-eval"}, "base": None}}}}
    listing = tpu_job.keep_job_outputs(work, record, out)
    assert sorted(p.name for p in (out / "events").iterdir()) == ["rl-eval.jsonl", "rl-job.jsonl"]
    assert [(e["name"], e["bytes"]) for e in listing] == [("jit_step-abc-cache", 7)]
