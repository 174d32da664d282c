"""End to end on CPU with MaxText for real: one tiny model, one job that is killed during training and
rerun, and a no-training round trip on that job's converted checkpoint. Shared to keep CI time small.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.trainer.conftest import REPO, TINY_EXAMPLE, write_spec
from tests.trainer.spec_edit import with_field
from trainer.contract import JobSpec, RunLayout, Stage, parse_event

pytestmark = pytest.mark.slow

SECRET = "hf_slowtest_SECRET_never_logged"


def _env(tiny: Path, out: Path, cache: dict[str, str]) -> dict[str, str]:
    env = dict(
        os.environ,
        RLJOB_TINY_DIR=str(tiny),
        RLJOB_OUTPUT=str(out),
        HF_TOKEN=SECRET,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PYTHONPATH=str(REPO),
        **cache,
    )
    return env


def _stage_processes(job_id: str) -> list[int]:
    """Pids of MaxText stage processes of this job (their argv carries run_name=<job id>)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if f"run_name={job_id}".encode() in cmdline.read_bytes().split(b"\0"):
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue  # exited while we looked
    return pids


def _events_now(layout: RunLayout) -> list:
    path = Path(layout.events)
    return [parse_event(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.exists() else []


@pytest.fixture(scope="session")
def restarted_run(tiny_dir, shared_cache, tmp_path_factory) -> dict:
    """`trainer run` killed (SIGKILL) once train_rl saved its first actor checkpoint, then run again to the end.

    What the kill found is recorded (the events so far, the newest complete checkpoint once the stage
    process died with the trainer) so the tests can show it landed inside the train stage.
    """
    from trainer.stages.context import latest_actor_step

    out = tmp_path_factory.mktemp("runs")
    env = _env(tiny_dir, out, shared_cache)
    # The tiny example, evaluating after every batch and exporting the best-evaluated weights.
    text = TINY_EXAMPLE.read_text().replace("${RLJOB_TINY_DIR}", str(tiny_dir)).replace("${RLJOB_OUTPUT}", str(out))
    spec = with_field(with_field(yaml.safe_load(text), "grpo.eval_interval", 1), "export.checkpoint", "best")
    spec = with_field(spec, "grpo.epsilon_high", 0.28)  # one step per batch: the ratio is 1, so no clip binds
    spec_file = write_spec(out / "tiny-best.yaml", spec)
    cmd = [sys.executable, "-m", "trainer", "run", "--spec", str(spec_file), "--job-id", "rl-slowtest0001"]
    layout = RunLayout(str(out), "rl-slowtest0001")
    with open(out / "attempt1.out", "w") as stdout:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=stdout, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 480
        while not latest_actor_step(layout) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        events_at_kill = _events_now(layout)
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    attempt1 = (out / "attempt1.out").read_text()[-3000:]
    # -9 only if the signal found the trainer alive: had it ended on its own, this is its exit code.
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, attempt1)
    deadline = time.monotonic() + 30
    while _stage_processes(layout.job_id) and time.monotonic() < deadline:  # PR_SET_PDEATHSIG is asynchronous
        time.sleep(0.1)
    assert not _stage_processes(layout.job_id), "train_rl outlived the killed trainer"
    step_at_kill = latest_actor_step(layout)  # nothing writes checkpoints any more
    train_marker_at_kill = Path(layout.stage_marker(Stage.TRAIN)).exists()
    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    return {
        "layout": layout,
        "events": _events_now(layout),
        "killed_at": killed_at,
        "tiny": tiny_dir,
        "stdout": second.stdout,
        "events_at_kill": events_at_kill,
        "step_at_kill": step_at_kill,
        "train_marker_at_kill": train_marker_at_kill,
        "attempt1": attempt1,
    }


def _attempt_events(events, attempt: int):
    starts = [i for i, e in enumerate(events) if e.type == "run_started"]
    begin = starts[attempt - 1]
    end = starts[attempt] if attempt < len(starts) else len(events)
    return events[begin:end]


def test_end_to_end_export_loads_and_every_step_keeps_scored_samples(restarted_run):
    from trainer.contract import SIGNAL_METRIC, StepSamples

    layout = restarted_run["layout"]
    final = restarted_run["events"][-1]
    assert final.type == "run_finished" and final.ok and final.exit_code == 0
    steps = [e.step for e in restarted_run["events"] if e.type == "train_step"]
    resumed = json.loads(Path(layout.stage_marker(Stage.TRAIN)).read_text())["outputs"]["resumed_from_step"]
    # Steps up to the kill may be lost (Tunix buffers TensorBoard writes); every later step is reported once.
    assert len(steps) == len(set(steps)) and set(range(resumed + 1, 4)) <= set(steps), steps
    export_marker = json.loads(Path(layout.stage_marker(Stage.EXPORT)).read_text())
    assert export_marker["outputs"]["verified"] is True
    verify_line = [line for line in Path(layout.stage_log(Stage.EXPORT)).read_text().splitlines() if '"finite"' in line]
    assert json.loads(verify_line[-1])["finite"] is True  # transformers loaded it and the logits are finite
    # That training learns is shown by test_slow_learning.py against a control; here, that each step's
    # completions were kept with the score the spec's reward function gave them.
    for step in range(resumed + 1, 4):
        samples = StepSamples.model_validate_json(Path(layout.samples_file(step)).read_text())
        assert samples.samples and samples.num_generations == 2
        for sample in samples.samples:
            assert sample.rewards == {"completion_length_reward": len(sample.completion) / 512.0}
    # A length reward differs between any two completions: every group carries signal.
    assert all(e.metrics[SIGNAL_METRIC] == 1.0 for e in restarted_run["events"] if e.type == "train_step")
    # The stop token's wrapper of Tunix's learner ran in train_rl (trainer/rollout/stop_token.py: without its
    # recorded lengths the step raises); what it puts into the loss is tests/trainer/rollout/test_stop_token.py's subject.
    for e in (e for e in restarted_run["events"] if e.type == "train_step"):
        empty, stopped = e.metrics["completions/train/empty_fraction"], e.metrics["completions/train/stopped_fraction"]
        assert 0.0 <= empty <= stopped <= 1.0, e.metrics
        # The engine's log-probabilities of what it sampled against the trainer's forward over the same tokens
        # (trainer/maxtext_entry/logprob_agreement.py): both sides run here in the spec's dtype on CPU.
        print("agreement", e.step, {k: v for k, v in e.metrics.items() if k.startswith("sampler_trainer/")})
        assert e.metrics["sampler_trainer/train/logp_diff_mean"] < 1e-3, e.metrics  # fp32 both sides: ~3e-7 measured
        assert e.metrics["sampler_trainer/train/probs_pearson_corr"] > 0.99, e.metrics


def test_restart_skips_convert_and_continues_training_from_the_saved_step(restarted_run):
    from trainer.progress.tensorboard_scalars import parse_records, scalars_from_record

    layout, events = restarted_run["layout"], restarted_run["events"]
    # The kill landed inside the train stage: started, not finished, a checkpoint saved, steps left.
    before_kill = restarted_run["events_at_kill"]
    assert any(e.type == "stage_started" and e.stage == "train" for e in before_kill), restarted_run["attempt1"]
    assert not any(e.type == "stage_finished" and e.stage == "train" for e in before_kill)
    assert not restarted_run["train_marker_at_kill"]
    assert _attempt_events(events, 1)[-1].type != "run_finished"  # the first attempt never got to say how it ended
    step_at_kill = restarted_run["step_at_kill"]
    assert step_at_kill is not None and 1 <= step_at_kill < 3, step_at_kill

    second = _attempt_events(events, 2)
    assert second[0].attempt == 2
    convert = [e for e in second if e.type == "stage_finished" and e.stage == "convert"]
    assert convert and convert[0].skipped
    assert not any(e.type == "stage_started" and e.stage == "convert" for e in second)
    assert any(e.type == "stage_started" and e.stage == "train" for e in second)  # trained again, not skipped
    resumed = json.loads(Path(layout.stage_marker(Stage.TRAIN)).read_text())["outputs"]["resumed_from_step"]
    assert resumed == step_at_kill  # from the checkpoint the killed attempt left, not from 0
    new_files = [
        p for p in Path(layout.rl_run, "tensorboard").glob("events.out.tfevents.*") if p.stat().st_ctime > restarted_run["killed_at"]
    ]
    actor_steps = set()
    for path in new_files:
        records, _ = parse_records(path.read_bytes())
        actor_steps |= {s.step for r in records for s in scalars_from_record(r) if s.tag == "actor/train/loss"}
    assert actor_steps and min(actor_steps) == resumed + 1, (resumed, actor_steps)
    seqs = [e.seq for e in events]
    assert seqs == list(range(len(seqs)))  # numbering continued across the kill


def test_train_rl_ran_with_the_specs_dtype_and_kept_only_the_last_checkpoint(restarted_run):
    """What MaxText itself resolved (pyconfig logs every config key at start), not our argv: the tiny
    spec's float32 is both the weights' and the compute dtype (base.yml's bfloat16 otherwise), and
    Orbax kept one checkpoint of the three the run saved (checkpoint_period 1, keep_last_checkpoints
    defaults to 1): the newest, which the export read."""
    import re

    layout = restarted_run["layout"]
    train_log = Path(layout.stage_log(Stage.TRAIN)).read_text()
    keys = "dtype|weight_dtype|max_num_checkpoints_to_keep|checkpoint_period"
    resolved = re.findall(rf"Config param ({keys}): (\S+)", train_log)
    assert len(resolved) == 8, resolved  # each attempt's train_rl logged its config once
    assert dict(resolved) == {
        "dtype": "float32",
        "weight_dtype": "float32",
        "max_num_checkpoints_to_keep": "1",
        "checkpoint_period": "1",
    }, resolved
    steps = sorted(p.name for p in Path(layout.actor_checkpoints).iterdir())
    assert steps == ["3"], steps  # no step dir besides the newest, and no unfinished tmp dir
    # The run's size as reported at the export's end: the one kept actor checkpoint and the best weights
    # (export.checkpoint=best) are the checkpoints part.
    last = [e for e in restarted_run["events"] if e.type == "storage"][-1]
    kept = sum(p.stat().st_size for p in Path(layout.rl_run, "checkpoints").rglob("*") if p.is_file())
    assert Path(layout.best_checkpoints).is_dir()
    assert last.stage == Stage.EXPORT and last.storage.parts["checkpoints"] == kept > 0, last.storage
    assert last.storage.parts["export"] > 0 and last.storage.parts["converted"] == 0  # converted: the shared cache
    print("run storage:", last.storage.model_dump_json())


def test_tiny_and_llama_3_1_tokenizers_keep_every_chat_prompt_token_in_the_mask(tiny_dir):
    """The tiny model's tokenizer has Meta's Llama 3.1 ids and pads with <|finetune_right_pad_id|>, which no chat
    prompt holds: Tunix's masks were right there, so the tiny runs could not show the defect. Meta's Llama 3.1
    Instruct tokenizer sets no pad token, so Tunix's TokenizerAdapter makes pad its EOS <|eot_id|>, which ends every
    chat turn; trainer/rollout/stop_token.py keeps those tokens in the mask."""
    from transformers import AutoTokenizer

    from tests.trainer.pad_and_eos import pad_and_eos

    tiny = AutoTokenizer.from_pretrained(str(tiny_dir / "model"))
    seen = pad_and_eos(tiny)
    assert seen["pad"] != seen["eos"] and seen["pad_ids_in_prompt"] == 0, seen
    assert seen["tokens_tunix_masks_in"] == seen["tokens_rljob_masks_in"] == seen["prompt_tokens"], seen
    tiny.pad_token = None  # as Meta ships Llama 3.1 Instruct's tokenizer_config.json
    seen = pad_and_eos(tiny)
    assert seen["pad"] == seen["eos"] == tiny.convert_tokens_to_ids("<|eot_id|>") and seen["pad_ids_in_prompt"] >= 2, seen
    assert seen["tokens_tunix_masks_in"] == seen["prompt_tokens"] - seen["pad_ids_in_prompt"], seen
    assert seen["tokens_rljob_masks_in"] == seen["prompt_tokens"], seen


def test_tunix_was_given_the_specs_kl_estimator_and_upper_clip(restarted_run):
    """Read from train_rl's own log of the GrpoConfig it built ("GRPO config resolved"), not from our argv:
    train_rl passes Tunix neither, so without trainer/maxtext_entry/grpo_objective.py this reads `kl` (k1) and
    has no epsilon_high."""
    import re

    train_log = Path(restarted_run["layout"].stage_log(Stage.TRAIN)).read_text()
    keys = "kl_loss_mode|epsilon_high|epsilon|loss_agg_mode|beta"
    resolved = re.findall(rf"^\s+({keys}) = (\S+)$", train_log, re.M)
    assert len(resolved) == 10, resolved  # each attempt's train_rl built it once
    assert dict(resolved) == {
        "kl_loss_mode": "'low_var_kl'",
        "epsilon_high": "0.28",
        "epsilon": "0.2",
        "loss_agg_mode": "'sequence-mean-token-mean'",
        "beta": "0.08",
    }, resolved


def test_goodput_parts_name_rollout_update_and_checkpoint_and_add_up_to_the_wall_time(restarted_run):
    """The goodput recorder's reports from the real train_rl (both attempts), folded as the service folds
    them: train_rl's measured parts fit inside its train stage, and the job's parts add up to its wall."""
    from datetime import timedelta

    from service.domain.cost.goodput import goodput_parts, job_goodput
    from service.domain.progress import fold_events
    from service.domain.records.models import JobRecord
    from service.domain.records.phases import JobPhase

    events = restarted_run["events"]
    second = _attempt_events(events, 2)
    reports = [e for e in second if e.type == "goodput"]
    assert reports and reports[-1].train.final and reports[-1].attempt == 2, [e.type for e in second]
    final = reports[-1].train
    assert final.parts["rollout"] > 0 and final.parts["update"] > 0 and final.parts["checkpoint"] > 0, final
    assert final.parts["eval"] > 0 and final.parts["logprobs"] > 0, final  # the tiny spec evaluates; GRPO's passes
    train_s = next(e.duration_s for e in second if e.type == "stage_finished" and e.stage == Stage.TRAIN)
    assert sum(final.parts.values()) <= final.elapsed_s <= train_s, (final, train_s)
    # As the service sees the job: running from the first event to the last (no queue outside the service).
    first_at, last_at = events[0].time, events[-1].time
    spec = JobSpec.model_validate(
        {
            "name": "n",
            "model": {"source": "/models/tiny"},
            "output": restarted_run["layout"].output,
            "hardware": {"accelerator": "cpu", "rollout_engine": "jax"},
        }
    )
    record = JobRecord(
        id=restarted_run["layout"].job_id,
        team="t",
        name="n",
        spec=spec,
        spec_hash="h",
        phase=JobPhase.SUCCEEDED,
        created_at=first_at,
        updated_at=last_at,
        finished_at=last_at,
        phase_seconds={"RUNNING": (last_at - first_at) / timedelta(seconds=1)},
    )
    fold_events(record, events)
    wall, raw = goodput_parts(record, last_at)
    assert raw["other"] >= 0, raw  # measured parts never overlap: none is clamped
    goodput = job_goodput(record, last_at)
    assert goodput is not None and abs(sum(goodput.parts.values()) - goodput.wall_s) <= 0.05 * goodput.wall_s
    assert all(goodput.parts[p] > 0 for p in ("rollout", "update", "checkpoint", "export")), goodput
    print("goodput:", goodput.model_dump_json(), "train_rl attempt 2:", final.model_dump_json())


def test_the_jobs_reward_function_ran_in_the_sandbox_and_its_calls_are_in_the_step_metrics(restarted_run):
    """The tiny example's reward (its own functions_path) went through the sandbox (trainer/rewards_sandbox/), not train_rl's
    process: the train log says what isolation the workers got, and every reported step counts its calls."""
    from trainer.contract.spec.reward_sandbox import CALLS_METRIC, ERRORS_METRIC, NETWORK_ISOLATED_METRIC, TIMEOUTS_METRIC

    log = Path(restarted_run["layout"].stage_log(Stage.TRAIN)).read_text()
    assert "rljob: reward sandbox: reward functions run in sandboxed worker processes" in log
    steps = [e for e in restarted_run["events"] if e.type == "train_step"]
    assert steps and all(e.metrics.get(CALLS_METRIC, 0) >= 1 for e in steps), [e.metrics for e in steps]
    assert all(e.metrics[ERRORS_METRIC] == 0 and e.metrics[TIMEOUTS_METRIC] == 0 for e in steps)
    assert {e.metrics[NETWORK_ISOLATED_METRIC] for e in steps} <= {0.0, 1.0}


def test_hf_token_never_reaches_events_or_logs(restarted_run):
    layout = restarted_run["layout"]
    for path in [Path(layout.events), *Path(layout.root, "logs").glob("*.log")]:
        assert SECRET not in path.read_text(), path
    assert SECRET not in restarted_run["stdout"]


def test_round_trip_without_training_is_exact_and_forward_matches_hf(restarted_run, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from trainer.contract.spec.file import load_spec_file
    from trainer.runner import StageCommand, run_stage_command
    from trainer.sources import resolve_model
    from trainer.stages.convert import converted_checkpoint
    from trainer.stages.export import build_export_command

    layout, tiny = restarted_run["layout"], restarted_run["tiny"]
    monkeypatch.setenv("RLJOB_TINY_DIR", str(tiny))
    monkeypatch.setenv("RLJOB_OUTPUT", str(tmp_path))
    spec: JobSpec = load_spec_file(TINY_EXAMPLE)
    # The convert stage's marker says where the checkpoint is: the shared conversion cache.
    items = converted_checkpoint(layout)
    assert "/_cache/maxtext/" in items
    model = resolve_model(spec)
    command = build_export_command(spec, layout, model, actor_step=0, local_tokenizer=str(tiny / "model"))
    args = [
        f"load_parameters_path={items}"
        if a.startswith("load_parameters_path=")
        else f"base_output_directory={tmp_path / 'hf'}"
        if a.startswith("base_output_directory=")
        else a
        for a in command.args
    ]
    run_stage_command(StageCommand(command.module, tuple(args), command.env), tmp_path / "roundtrip.log")
    original = load_file(str(tiny / "model" / "model.safetensors"))
    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(original) == sorted(exported)
    for name, tensor in original.items():
        assert (tensor.float() == exported[name].float()).all(), name

    # MaxText's forward against HF's, and the jax rollout engine's KV-cached forward (with Llama 3.1 RoPE
    # scaling here) against MaxText's own: one process for both (maxtext_parity_check.py).
    check = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("maxtext_parity_check.py")), str(tiny / "model"), items, *model.args()],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    results = json.loads(check.stdout.strip().splitlines()[-1])
    result = results["hf_forward"]
    assert result["max_abs_diff"] < 1e-4 * max(1.0, result["logit_scale"]), result
    parity = results["cached_rollout"]
    assert parity["argmax_agree"] and parity["max_abs_diff"] < 1e-4 * max(1.0, parity["logit_scale"]), parity


def test_every_evaluation_keeps_its_rows_as_maxtext_and_the_jobs_rewards_scored_them(restarted_run):
    """The rows of each evaluation agree with MaxText's own totals for it (its log line), the events carry
    the summary, and the change from `before` pairs the same prompts, also across the kill."""
    import re

    from trainer.contract.run.evaluation import AFTER, BEFORE, EvalRow, label_step

    layout, events = restarted_run["layout"], restarted_run["events"]
    train_log = Path(layout.root, "logs", "train.log").read_text()
    post = re.findall(r"Post RL Training: corr=(\d+), total=(\d+)", train_log)
    assert post, train_log[-2000:]
    files = {
        p.stem: [EvalRow.model_validate_json(line) for line in p.read_text().splitlines()] for p in Path(layout.eval_dir).glob("*.jsonl")
    }
    # Attempt 1 evaluated the base model; attempt 2 resumed from a checkpoint, so its first evaluation is a step.
    resumed = json.loads(Path(layout.stage_marker(Stage.TRAIN)).read_text())["outputs"]["resumed_from_step"]
    # eval_interval 1: MaxText's hook also evaluated during training, labelled by Tunix's global step (batches).
    labels = set(files)
    assert {BEFORE, f"step-{resumed}", AFTER} <= labels <= {BEFORE, "step-1", "step-2", "step-3", AFTER}, sorted(files)
    assert {label_step(label) for label in labels - {BEFORE, AFTER}} - {resumed}, sorted(files)
    after = files[AFTER]
    assert (sum(r.correct for r in after), len(after)) == (float(post[-1][0]), int(post[-1][1]))
    assert [r.id for r in after] == [r.id for r in files[BEFORE]] and len(after) == 2  # batch_size 2 x 1 test batch
    assert all(r.completions and r.rewards == {"completion_length_reward": [len(c) / 512.0 for c in r.completions]} for r in after)
    summaries = [e.summary for e in events if e.type == "eval"]
    assert all(s is not None for s in summaries), summaries  # MaxText's own line was not reported a second time
    by_label = {s.label: s for s in summaries}
    assert by_label[AFTER].n == 2 and by_label[AFTER].rows_file == "after.jsonl"
    assert by_label[AFTER].vs_before is not None and by_label[AFTER].vs_before.n == 2
    assert label_step(f"step-{resumed}") == by_label[f"step-{resumed}"].step == resumed
    assert by_label[BEFORE].vs_before is None and by_label[BEFORE].step == 0
    # The tiny job brings its own reward (length), so its evaluations are scored by it: a row's outcome is the share
    # of its completions the reward paid for; MaxText's own score (its answer tags, 0 for a random model) stays beside.
    assert all(r.rewarded == sum(1 for c in r.completions if c) / len(r.completions) for r in after), after
    assert by_label[AFTER].scored_by == "rewards" and by_label[AFTER].correct == sum(r.rewarded or 0 for r in after)
    assert by_label[AFTER].maxtext_correct == float(post[-1][0])


def _orbax_embedding(params_dir: Path):
    import numpy as np
    import orbax.checkpoint as ocp

    with ocp.PyTreeCheckpointer() as checkpointer:
        tree = checkpointer.restore(str(params_dir))
    leaves = [(path, leaf) for path, leaf in _walk(tree) if "token_embedder" in path and "embedding" in path]
    assert len(leaves) == 1, [p for p, _ in _walk(tree)]
    return np.asarray(leaves[0][1], dtype=np.float32)


def _walk(tree, path=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _walk(value, (*path, str(key)))
    else:
        yield path, tree


def test_export_best_exports_the_weights_of_the_best_evaluation_not_the_last(restarted_run):
    """export.checkpoint=best: hf/ holds the weights the best evaluation measured (ties: the earliest), kept
    beside the actor's own retention, and manifest.json says which with the evaluation and its interval."""
    import numpy as np
    from safetensors.numpy import load_file

    from trainer.contract.run.best_checkpoint import BestCheckpoint, ExportedCheckpoint
    from trainer.contract.run.evaluation import AFTER, BEFORE

    layout, events = restarted_run["layout"], restarted_run["events"]
    record = BestCheckpoint.model_validate_json(Path(layout.best_checkpoint_record).read_text())
    manifest = json.loads(Path(layout.manifest).read_text())
    exported = ExportedCheckpoint.model_validate(manifest["exported_checkpoint"])
    assert exported.asked == exported.exported == "best" and exported.best == record and exported.step == record.step
    final = events[-1]
    assert final.type == "run_finished" and f"best-evaluated weights: the {record.label} evaluation" in final.message
    # The winner among the candidates the run evaluated (not `before`): the best accuracy, the earliest on a tie.
    summaries = [e.summary for e in events if e.type == "eval" and e.summary is not None and e.summary.label != BEFORE]
    best_accuracy = max(s.correct / s.n for s in summaries)
    first_best = next(s for s in summaries if s.correct / s.n == best_accuracy)
    assert (record.label, record.accuracy) == (first_best.label, best_accuracy), (record, summaries)
    assert record.label != AFTER and record.step < 3  # so the best weights are not the last ones
    assert record.params == f"{layout.best_checkpoints}/{record.step}/model_params"
    lo, hi = record.ci95
    assert 0 <= lo <= record.accuracy <= hi <= 1 and record.n == 2
    # Only the best step is kept under best/; the actor's retention kept only its newest, step 3.
    assert sorted(p.name for p in Path(layout.best_checkpoints).iterdir()) == [str(record.step)]
    best = _orbax_embedding(Path(record.params))
    last = _orbax_embedding(Path(layout.actor_checkpoints) / "3" / "model_params")
    assert not np.allclose(best, last)  # lr 1e-3: the steps between them moved the weights
    tensors = {}
    for file in Path(layout.export_dir).glob("*.safetensors"):
        tensors |= load_file(str(file))
    hf = np.asarray(tensors["model.embed_tokens.weight"], dtype=np.float32)
    assert np.array_equal(hf, best), "the export holds other weights than the best evaluation's"


def test_the_real_trainers_repro_record_names_what_ran(restarted_run):
    """repro.json from the real `trainer run` (its second attempt rewrote it): the spec as the pipeline resolved
    it, the installed versions the run imported, and content hashes that match the files it read."""
    import hashlib
    from importlib.metadata import version

    from trainer.contract import ReproRecord

    layout, tiny = restarted_run["layout"], restarted_run["tiny"]
    record = ReproRecord.model_validate_json(Path(layout.repro).read_text())
    assert record.job_id == layout.job_id
    ran = JobSpec.model_validate_json(Path(layout.spec).read_text())
    assert record.spec == ran.model_dump(mode="json") and record.spec["export"]["checkpoint"] == "best"
    assert record.versions["maxtext"] == version("maxtext") and record.versions["jax"] == version("jax")
    assert record.versions["tunix"] == version("google-tunix") and record.versions["python"] == sys.version.split()[0]
    assert record.image.reference is None  # a local run: no launcher named an image

    def sha256(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    assert [(h.uri, h.sha256) for h in record.data] == [
        (str(tiny / "data" / "train.jsonl"), sha256(tiny / "data" / "train.jsonl")),
        (str(tiny / "data" / "test.parquet"), sha256(tiny / "data" / "test.parquet")),
    ]
    assert record.reward_functions is not None and record.reward_functions.sha256 == sha256(tiny / "length_reward.py")
    model_files = [p for p in (tiny / "model").rglob("*") if p.is_file()]
    assert record.model.kind == "local" and record.model.content is not None
    assert record.model.content.files == len(model_files) and record.model.content.sha256
    assert record.hardware.accelerator == "cpu" and record.hardware.rollout_engine == "jax"
