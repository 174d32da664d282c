"""The seeds bench's decision rule, spread and seed counts on synthetic numbers, and the rljob arm's spec
(bench/learning/learning_seeds_stats.py, bench/learning/learning_seeds.py; issue 53 section 4). No job runs here."""

from __future__ import annotations

import json
import sys
import types

import pytest

from bench.learning import learning_folds, learning_seeds
from bench.learning import learning_seeds_stats as st
from bench.learning.registered_spec import as_registered, spec_sha256


def _per_seed(diffs: list[float], peer: float = 0.40) -> dict[str, dict[int, float]]:
    """rljob and peer_trl figures for seeds 1..n whose paired differences are `diffs` (peer's varies a little)."""
    seeds = range(1, len(diffs) + 1)
    peer_by_seed = {s: peer + 0.01 * s for s in seeds}
    return {"rljob": {s: peer_by_seed[s] + d for s, d in zip(seeds, diffs, strict=True)}, "peer_trl": peer_by_seed}


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [
        ([0.00, 0.01, -0.01], st.MATCHED),  # interval about [-1.7, +1.7] points
        ([-0.10, -0.12, -0.11], st.BEHIND),  # about [-12.7, -9.3]
        ([0.10, 0.12, 0.11], st.AHEAD),
        ([-0.05, 0.10, 0.02], st.CANNOT_TELL),  # about [-10.3, +15.0]: crosses 0 and the margin
        ([-0.04, -0.01, 0.04], st.CANNOT_TELL),  # crosses 0, within the margin at the centre, not at the ends
    ],
)
def test_each_verdict_is_reachable(diffs, expected):
    decision = st.decide(_per_seed(diffs))
    assert decision["verdict"] == expected
    assert decision["differences"] == pytest.approx(dict(zip((1, 2, 3), diffs, strict=True)))


def test_matched_takes_precedence_over_a_small_difference_that_excludes_zero():
    decision = st.decide(_per_seed([-0.02, -0.03, -0.025]))
    assert decision["difference"]["high"] < 0
    assert decision["verdict"] == st.MATCHED
    assert decision["interval_excludes_zero"] is True


def test_the_interval_is_the_90_percent_t_interval_over_seeds():
    d = st.decide(_per_seed([0.00, 0.03, 0.06]))["difference"]
    # mean 3 points, sd 3 points, t(0.95, 2) = 2.919986: half-width 2.919986 * 3 / sqrt(3) = 5.0576 points
    assert d["mean"] == pytest.approx(0.03)
    assert d["sd"] == pytest.approx(0.03)
    assert d["half_width"] == pytest.approx(0.050576, abs=1e-5)
    assert (d["low"], d["high"]) == pytest.approx((0.03 - 0.050576, 0.03 + 0.050576), abs=1e-5)


def test_verdict_edges():
    assert st.verdict(-0.05, 0.05) == st.MATCHED
    assert st.verdict(-0.0501, 0.01) == st.CANNOT_TELL
    assert st.verdict(-0.08, -0.0001) == st.BEHIND
    assert st.verdict(0.0001, 0.08) == st.AHEAD
    assert st.verdict(-0.06, 0.0) == st.CANNOT_TELL


def test_a_missing_seed_leaves_the_verdict_incomplete():
    per_seed = _per_seed([0.0, 0.01, -0.01])
    del per_seed["peer_trl"][3]
    decision = st.decide(per_seed)
    assert decision["verdict"] == st.INCOMPLETE
    assert decision["missing"] == {"peer_trl": [3]}
    assert decision["difference"]["n"] == 2  # shown, but not decided on
    assert st.decide({"rljob": {1: 0.5}})["verdict"] == st.INCOMPLETE


def test_spread_per_arm_and_seeds_needed():
    decision = st.decide({"rljob": {1: 0.40, 2: 0.43, 3: 0.46}, "peer_trl": {1: 0.50, 2: 0.50, 3: 0.50}})
    assert decision["spread"]["rljob"]["sd"] == pytest.approx(0.03)
    assert decision["spread"]["peer_trl"]["sd"] == pytest.approx(0.0)
    # sd 3 points: n = 3 gives a half-width of 5.06 points, n = 4 t(0.95, 3) = 2.353363 * 3 / 2 = 3.53
    assert decision["spread"]["rljob"]["seeds_needed"]["half_width"] == 4
    assert decision["spread"]["peer_trl"]["seeds_needed"] == {"half_width": 2, "matched_80": 2}


def test_seeds_needed():
    assert st.seeds_needed(0.03) == 4
    assert st.seeds_needed(0.0296) == 3  # 1.686 * 2.96 = 4.99 points
    # about 80% inside +-5 at a true difference of 0 needs (t(.95) + t(.90)) sd / sqrt(n) <= 5 points: more seeds
    assert st.seeds_needed(0.03, power=st.PLANNING_POWER) == 5  # (2.132 + 1.533) * 3 / sqrt(5) = 4.92 points; n = 4: 5.99
    assert st.seeds_needed(0.10) > st.seeds_needed(0.05) > st.seeds_needed(0.03)
    assert st.seeds_needed(None) is None
    assert st.seeds_needed(10.0) is None  # more than MAX_SEEDS


def _rows(correct_samples: list[int], greedy: int = 0) -> list[dict]:
    return [{"id": str(i), "greedy": greedy, "samples": [1] * k + [0] * (8 - k)} for i, k in enumerate(correct_samples)]


def test_summarize_reads_the_result_file_and_pairs_by_seed():
    results = {
        "base": {"rows": _rows([1] * 10)},
        "runs": {
            "rljob": {str(s): {"rows": _rows([4] * 9 + [4 + s - 2])} for s in (1, 2, 3)},
            "peer_trl": {str(s): {"rows": _rows([4] * 10)} for s in (1, 2, 3)} | {"4": {"rows": _rows([8] * 10)}},
        },
    }
    summary = st.summarize(results)
    assert summary["base"]["sampled"] == pytest.approx(10 / 80)
    assert summary["runs"]["rljob"][1]["sampled"] == pytest.approx(39 / 80)
    # differences of -1.25, 0 and +1.25 points: sd 1.25, half-width 2.1 points
    assert summary["decision"]["differences"] == pytest.approx({1: -1 / 80, 2: 0.0, 3: 1 / 80})
    assert summary["decision"]["verdict"] == st.MATCHED
    assert summary["exploratory_seeds"] == {"peer_trl": [4]}
    results["runs"]["rljob"]["1"]["rows"] = _rows([4] * 9)
    with pytest.raises(ValueError, match="other rows"):
        st.summarize(results)


def test_the_registration_states_the_rule_the_code_applies():
    pre = json.loads(st.PREREGISTRATION.read_text())
    folds = json.loads(learning_folds.PREREGISTRATION.read_text())
    assert pre["seeds"] == list(st.SEEDS)
    assert pre["decision_rule"]["rule"] == st.DECISION_RULE
    assert pre["decision_rule"]["confidence"] == st.CONFIDENCE
    assert pre["decision_rule"]["margin_points"] == pytest.approx(st.MARGIN * 100)
    assert pre["decision_rule"]["verdicts"] == list(st.VERDICTS)
    assert pre["spread"]["seeds_needed"] == st.SEEDS_NEEDED_RULE
    # the folds bench's setting, with only TRL's KL gradient added
    assert pre["grpo"] == {**folds["grpo"], "kl_direction": "policy_to_reference"}
    assert pre["steps"] == folds["steps"] and pre["evaluation"]["seed"] == folds["evaluation"]["seed"]
    assert pre["arms"]["peer_trl"]["requires"]["use_bias_correction_kl"] is True


def test_the_rljob_spec_has_the_registered_kl_direction_seed_and_hash(tmp_path, monkeypatch):
    for name in ("RLJOB_SMOLLM2_DIR", "RLJOB_ARITH_DIR", "RLJOB_OUTPUT"):
        monkeypatch.setenv(name, "unset")  # job_spec sets them; monkeypatch puts them back
    monkeypatch.setattr(learning_folds, "WORK", learning_seeds.WORK)
    pre = learning_seeds.settings()
    folds = {"A": {"dir": str(learning_seeds.WORK / "folds" / "A")}}
    specs = {s: learning_seeds.rljob_spec(pre, folds, s) for s in pre["seeds"]}
    for s, spec in specs.items():
        assert spec["seed"] == s
        assert spec["grpo"]["kl_direction"] == "policy_to_reference" == pre["arms"]["rljob"]["kl_direction"]
        assert spec["grpo"]["num_batches"] == pre["steps"]
        assert spec["grpo"]["rewards"]["functions"] == ["arith_correct"]
        assert spec["dataset"]["train_files"] == [str(learning_seeds.WORK / "folds" / "A" / "train.parquet")]
        assert spec["hardware"]["accelerator"] == "cpu"
        assert learning_seeds.registered_sha256(spec) == pre["arms"]["rljob"]["job_spec_sha256"][str(s)]
    chip = learning_seeds.rljob_spec(pre, folds, 1, accelerator="v5e-1")
    assert chip["hardware"]["accelerator"] == "v5e-1"
    assert {k: v for k, v in chip.items() if k != "hardware"} == {k: v for k, v in specs[1].items() if k != "hardware"}


def test_a_field_added_since_the_registration_leaves_the_registered_hashes_alone(monkeypatch):
    for name in ("RLJOB_SMOLLM2_DIR", "RLJOB_ARITH_DIR", "RLJOB_OUTPUT"):
        monkeypatch.setenv(name, "unset")
    monkeypatch.setattr(learning_folds, "WORK", learning_seeds.WORK)
    pre = learning_seeds.settings()
    built = learning_seeds.rljob_spec(pre, {"A": {"dir": str(learning_seeds.WORK / "folds" / "A")}}, 1)
    # hardware.layer_activations and model.logits_dtype were added after the registration: at their defaults they
    # leave the registered form
    assert built["hardware"]["layer_activations"] == "auto" and built["model"]["logits_dtype"] == "bfloat16"
    spec = json.loads(json.dumps(built))
    del spec["hardware"]["layer_activations"], spec["model"]["logits_dtype"]
    assert as_registered(built, learning_seeds.registered_shape()) == spec
    # As if grpo.kv_cache_buffer (default 256) were added to JobSpec after the registration: its spec had no such field.
    shape = json.loads(json.dumps(learning_seeds.registered_shape()))
    del shape["grpo"]["kv_cache_buffer"]
    del shape["name"]  # a field no spec can do without is never left out
    assert spec["grpo"]["kv_cache_buffer"] != 256  # the registered jobs set it: it stays
    assert as_registered(spec, shape) == spec
    at_default = json.loads(json.dumps(spec))
    at_default["grpo"]["kv_cache_buffer"] = 256
    registered = as_registered(at_default, shape)
    assert "kv_cache_buffer" not in registered["grpo"] and registered["name"] == spec["name"]
    without = json.loads(json.dumps(at_default))
    del without["grpo"]["kv_cache_buffer"]
    assert spec_sha256(registered) == spec_sha256(without) != spec_sha256(at_default)
    # and the registration's own fields are hashed whole
    assert as_registered(spec, learning_seeds.registered_shape()) == spec


def test_the_peer_command_passes_the_seed(monkeypatch):
    monkeypatch.setattr(learning_folds, "WORK", learning_seeds.WORK)
    pre = learning_seeds.settings()
    cmd = learning_seeds.peer_command(pre, {"A": {"dir": "/f/A"}}, 2, learning_seeds.WORK / "peer_trl" / "s2")
    assert cmd[cmd.index("--seed") + 1] == "2"
    assert cmd[cmd.index("--steps") + 1] == str(pre["steps"])
    assert cmd[cmd.index("--train") + 1] == "/f/A/train.jsonl"
    assert json.loads(cmd[cmd.index("--spec-json") + 1]) == {**pre["grpo"], "num_batches": pre["steps"]}


def test_reruns_are_recorded_with_their_reason():
    results = {"runs": {"rljob": {"1": {"train": {"phase": "FAILED"}}, "2": {"train": {"phase": "SUCCEEDED"}}}}}
    assert learning_seeds.pending(results, "rljob", [1, 2, 3], None) == [3]
    assert learning_seeds.pending(results, "rljob", [1], "machine lost") == [1]
    assert results["reruns"] == [{"arm": "rljob", "seed": 1, "reason": "machine lost", "replaced": {"train": {"phase": "FAILED"}}}]
    assert set(results["runs"]["rljob"]) == {"2"}


@pytest.mark.parametrize("bias_correction_default", [True, False])
def test_trl_runs_only_with_the_registered_kl_gradient(tmp_path, monkeypatch, bias_correction_default):
    """A stand-in for trl.GRPOConfig (TRL is not in the test environment) with TRL 1.16's defaults for the fields
    peer_trl.py leaves alone; with the other default the runner refuses before any run."""

    class GRPOConfig:
        def __init__(self, **kwargs):
            self.fields = {"use_bias_correction_kl": bias_correction_default, "importance_sampling_level": "token", **kwargs}

        def to_dict(self):
            return self.fields

    monkeypatch.setitem(sys.modules, "trl", types.SimpleNamespace(GRPOConfig=GRPOConfig))
    pre = learning_seeds.settings()
    if not bias_correction_default:
        with pytest.raises(SystemExit, match="not the registered one"):
            learning_seeds.trl_resolved(pre, 2, tmp_path)
        return
    resolved = learning_seeds.trl_resolved(pre, 2, tmp_path)
    assert resolved["config"]["seed"] == 2 and resolved["config"]["use_bias_correction_kl"] is True
    assert resolved["config"]["max_steps"] == pre["steps"] and resolved["config"]["beta"] == pre["grpo"]["beta"]
    assert set(resolved["versions"]) == set(learning_seeds.TRL_PACKAGES)


def test_the_unpaired_reading_is_welchs_interval_beside_the_paired_rule():
    """The shared-stream redo (issue 66 §4) reports both: pairing removes what a seed sets on both sides, so where
    the arms move together by seed the paired interval is the narrower."""
    rljob = {1: 0.40, 2: 0.50, 3: 0.60, 4: 0.45}
    peer = {s: v - 0.02 + (0.01 if s % 2 else -0.01) for s, v in rljob.items()}
    decision = st.decide({"rljob": rljob, "peer_trl": peer}, seeds=(1, 2, 3, 4))
    unpaired, paired = decision["unpaired"], decision["difference"]
    assert unpaired["mean"] == pytest.approx(paired["mean"]) and unpaired["half_width"] > 5 * paired["half_width"]
    from scipy import stats as scipy_stats

    welch = scipy_stats.ttest_ind(list(rljob.values()), list(peer.values()), equal_var=False)
    t = unpaired["mean"] / unpaired["se"]
    assert t == pytest.approx(welch.statistic) and unpaired["df"] == pytest.approx(welch.df)


def test_the_shared_stream_registration_hands_trl_the_stream_unshuffled(monkeypatch, tmp_path):
    """Issue 66 §4's redo: the same runner under learning_shared_stream.json writes its own result and work
    directory, and TRL's command takes seed s's stream file with --no-shuffle; the seeds bench's keeps TRL's shuffle."""
    monkeypatch.setattr(learning_seeds, "PREREGISTRATION", learning_seeds.PREREGISTRATION)
    monkeypatch.setattr(learning_seeds, "RESULT", learning_seeds.RESULT)
    monkeypatch.setattr(learning_seeds, "WORK", learning_seeds.WORK)
    monkeypatch.delenv("RLJOB_SEEDS_WORK", raising=False)
    seeds_pre = learning_seeds.settings()
    assert "--no-shuffle" not in learning_seeds.peer_command(seeds_pre, {"A": {"dir": "/f/A"}}, 2, tmp_path)
    learning_seeds.use_registration("learning_shared_stream")
    pre = learning_seeds.settings()
    assert pre["data_stream"] == "shared" and pre["pinned_code"] is True
    assert learning_seeds.RESULT.name == "learning_shared_stream.json" and str(learning_seeds.WORK) == pre["work"]
    cmd = learning_seeds.peer_command(pre, {"A": {"dir": "/f/A"}}, 2, tmp_path, tmp_path / "train-stream.jsonl")
    assert "--no-shuffle" in cmd and cmd[cmd.index("--train") + 1] == str(tmp_path / "train-stream.jsonl")
    assert pre["grpo"] == seeds_pre["grpo"] and pre["steps"] == seeds_pre["steps"]  # only the stream differs


def test_a_pinned_registration_runs_only_from_a_checkout_of_its_commit():
    pre = {"pinned_code": True}
    head = learning_seeds._git("rev-parse", "HEAD")
    objects = {p: learning_seeds._git("rev-parse", f"{head}:{p}") for p in learning_seeds.CODE_PATHS}
    same = {"registered_commit": head, "objects": objects, "uncommitted": []}
    assert learning_seeds.pinned_code_problem(pre, same) is None
    assert learning_seeds.pinned_code_problem({}, {**same, "uncommitted": ["M trainer/x.py"]}) is None  # not pinned
    moved = {**same, "objects": {**objects, "trainer": "0" * 40}}
    assert "differs from the registration's commit" in (learning_seeds.pinned_code_problem(pre, moved) or "")
    assert "differs" in (learning_seeds.pinned_code_problem(pre, {**same, "uncommitted": ["M trainer/x.py"]}) or "")
    assert "not committed" in (learning_seeds.pinned_code_problem(pre, {**same, "registered_commit": None}) or "")
