"""bench/learning/README.md's seeds passage (bench/readme_render/learning_seeds.py) renders what the rows say under the
registered rule, not the summary stored beside them, and names what is missing while the set is partial."""

from __future__ import annotations

import copy

from bench.learning import learning_seeds_stats as st
from bench.readme_render.learning_seeds import render_learning_seeds


def _rows(correct_samples: list[int]) -> list[dict]:
    return [{"id": str(i), "greedy": 0, "samples": [1] * k + [0] * (8 - k)} for i, k in enumerate(correct_samples)]


CODE = {"commit": "c" * 40, "registered_commit": "r" * 40, "objects": {"trainer": "t1", "service": "s1"}, "uncommitted": []}


def _run(job: str, rows: list[dict]) -> dict:
    train = {"job_id": job, "phase": "SUCCEEDED", "train_seconds": 90.0}
    return {"train": train, "rows": rows, "code": CODE, "where": {"accelerator": "cpu"}}


def _results(rljob_correct: int) -> dict:
    return {
        "base": {"rows": _rows([1] * 10), "code": CODE},
        "runs": {
            "rljob": {str(s): _run(f"rl-{s}", _rows([rljob_correct] * 9 + [rljob_correct + s - 2])) for s in (1, 2, 3)},
            "peer_trl": {str(s): _run(f"trl-{s}", _rows([4] * 10)) for s in (1, 2, 3)},
        },
        "summary": {"decision": {"verdict": st.MATCHED}},  # stored, and stale for _results(6)
    }


def test_the_verdict_is_recomputed_from_the_rows():
    assert "**matched**" in render_learning_seeds(_results(4))
    behind = render_learning_seeds(_results(2))  # 2 of 8 against 4 of 8 per row: 25 points behind at every seed
    assert "**rljob behind**" in behind and "matched" not in behind.split("Verdict")[1]
    assert "every run's code under the registered paths is the same" in behind


def test_a_partial_set_is_incomplete_and_a_code_difference_is_named():
    results = _results(4)
    del results["runs"]["peer_trl"]["2"]
    results["runs"]["rljob"]["3"] = copy.deepcopy(results["runs"]["rljob"]["3"])
    results["runs"]["rljob"]["3"]["code"] = {**CODE, "objects": {"trainer": "t2", "service": "s1"}}
    text = render_learning_seeds(results)
    assert "Verdict: incomplete (no evaluated run yet for peer_trl seed(s) 2)" in text
    assert "the runs' code differs under trainer" in text


def test_a_rerun_is_listed_with_its_reason():
    results = _results(4)
    results["reruns"] = [{"arm": "rljob", "seed": 2, "reason": "OOM-killed", "replaced": {"train": {"job_id": "rl-old"}}}]
    assert "rljob seed 2 (job `rl-old` replaced): OOM-killed" in render_learning_seeds(results)


def test_the_shared_stream_passage_reads_its_own_registration_and_says_not_powered():
    """learning_shared_stream.json registers 8 seeds: a set of 8 whose paired interval straddles 0 beyond the margin is
    'cannot tell', said as not powered with the count the spread asks for; the unpaired reading and each TRL run's
    stream check are beside it."""
    from bench.readme_render.learning_seeds import render_learning_shared_stream

    seeds = range(1, 9)
    runs = {
        "rljob": {str(s): _run(f"rl-{s}", _rows([4 + (s % 3) - 1] * 10)) for s in seeds},
        "peer_trl": {str(s): _run(f"trl-{s}", _rows([4 - (s % 3) + 1] * 10)) for s in seeds},
    }
    for s in seeds:
        runs["peer_trl"][str(s)]["train"]["stream"] = {"steps": 40, "matching": 40, "reported": 40}
        runs["peer_trl"][str(s)]["train"]["command"] = ["python", "bench/learning/peer_trl.py", "--no-shuffle"]
    text = render_learning_shared_stream({"base": {"rows": _rows([1] * 10), "code": CODE}, "runs": runs})
    assert "bench/preregistration/learning_shared_stream.json" in text and "Seeds 1-8" in text
    assert "**cannot tell at this many seeds**" in text and "Not powered at 8 seeds: the measured spread asks for" in text
    assert "Read unpaired (Welch):" in text and "unshuffled (its command); its steps' prompts were the stream's in 40 of 40 steps" in text
    assert "Read unpaired" not in render_learning_seeds(_results(4))  # the seeds bench's passage is as it was


def test_an_rljob_run_is_set_beside_the_seeds_benchs_run_of_its_seed():
    """rljob's side of a seed is the same job in both benches: the shared-stream passage says whether it repeated."""
    from bench.readme_render.learning_seeds import render_learning_shared_stream

    def rows(texts: list[str]) -> list[dict]:
        return [{"id": str(i), "greedy": 0, "samples": [1] + [0] * 7, "completions": [t]} for i, t in enumerate(texts)]

    now = {"base": {"rows": rows(["b"] * 3), "code": CODE}, "runs": {"rljob": {"1": _run("rl-1", rows(["x", "y", "z"]))}}}
    before = {"runs": {"rljob": {"1": _run("rl-old", rows(["x", "y", "w"]))}}}
    text = render_learning_shared_stream(now, before)
    assert "the seeds bench's run of this seed: sampled strict 12.5%; every completion the same on 2 of 3 rows" in text
