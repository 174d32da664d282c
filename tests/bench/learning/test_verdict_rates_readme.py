"""bench/learning/README.md's verdict error-rate block is bench/learning/verdict_error_rates.py's rendering of the committed
bench/results/verdict_error_rates.json: every figure in its table is the JSON's, the JSON's numbers are
what its counts say, were measured under the current HealthPolicy, and bear out the block's claims."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from bench.learning import verdict_error_rates as bench
from service.domain.health.learning_health import HealthPolicy
from service.domain.records.train_step_summary import FIRST_STEPS_KEPT, HEALTH_WINDOW_STEPS
from trainer.contract.run.evaluation import wilson_interval

REPO = Path(__file__).resolve().parents[3]
README = REPO / "bench" / "learning" / "README.md"
ROW = re.compile(r"^\| (?P<what>[^|]+) \| (?P<when>[^|]+) \| (?P<one>[^|]+) \| (?P<default>[^|]+) \|$")
CELL = re.compile(r"^(?P<p>[\d.]+)% \[(?P<low>[\d.]+)%, (?P<high>[\d.]+)%\](?:, median step (?P<median>[\d.]+))?$")


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads(bench.RESULT_FILE.read_text())


def _cells(results: dict) -> list[dict]:
    return [*results["false_positive_per_look"], *results["false_positive_per_run"], *results["power"]]


def _row_cells(results: dict, what: str, when: str, looks: int) -> dict:
    """The JSON cell a table row stands for, found from the row's own words."""
    if m := re.fullmatch(r"constant (\d+)%", what):
        rate = int(m[1]) / 100
        if m2 := re.fullmatch(r"at step (\d+) \(judged once\)", when):
            return bench._pick(results["false_positive_per_look"], rate=rate, step=int(m2[1]), looks=looks)
        m2 = re.fullmatch(r"at any step of (\d+)", when)
        assert m2, when
        return bench._pick(results["false_positive_per_run"], rate=rate, steps=int(m2[1]), looks=looks)
    m = re.fullmatch(r"(\d+)% -> (\d+)% over (\d+) steps", what)
    assert m, what
    return bench._pick(results["power"], looks=looks, steps=int(m[3]), **{"from": int(m[1]) / 100, "to": int(m[2]) / 100})


def test_every_figure_in_the_table_is_the_jsons(results: dict) -> None:
    one, default = results["settings"]["looks"]
    rows = [m for line in bench.render(results).splitlines() if (m := ROW.match(line)) and not line.startswith("|--")]
    assert rows[0]["one"] == f"{one} look" and rows[0]["default"] == f"{default} looks"
    seen = []
    for row in rows[1:]:
        for looks, text in ((one, row["one"]), (default, row["default"])):
            cell = _row_cells(results, row["what"], row["when"], looks)
            shown = CELL.match(text)
            assert shown, text
            for shown_pct, value in zip(shown.group("p", "low", "high"), (cell["proportion"], *cell["ci95"]), strict=True):
                assert shown_pct == f"{value * 100:.1f}", (row["what"], row["when"], looks)  # the JSON's, to 0.1 point
            if "median_first_step" in cell:
                assert float(shown["median"]) == cell["median_first_step"]
            seen.append(id(cell))
    assert sorted(seen) == sorted(id(c) for c in _cells(results))  # each cell once, none left out


def test_the_json_is_what_its_counts_say_under_the_current_policy(results: dict) -> None:
    settings, policy = results["settings"], HealthPolicy()
    assert (settings["trend_p_max"], settings["trend_min_steps"], settings["default_trend_looks"]) == (
        policy.trend_p_max,
        policy.trend_min_steps,
        policy.trend_looks,
    ), "the policy changed: rerun the bench"
    assert settings["window_steps"] == HEALTH_WINDOW_STEPS, "the window changed: rerun the bench"
    assert settings["first_steps_kept"] == FIRST_STEPS_KEPT, "the first steps kept changed: rerun the bench"
    assert settings["looks"] == [1, policy.trend_looks]
    for cell in _cells(results):
        assert cell["runs"] == settings["runs_per_cell"] >= 1000
        assert cell["proportion"] == cell["improving"] / cell["runs"]
        assert cell["ci95"] == pytest.approx(list(wilson_interval(cell["improving"], cell["runs"])))


def test_the_json_bears_out_the_blocks_claims(results: dict) -> None:
    text = bench.render(results)
    assert f"keeps that below {bench.PER_RUN_FP_MAX:.0%} over 50 steps" in text
    assert bench.claim_failures(results) == []
    default = results["settings"]["default_trend_looks"]
    for cell in results["false_positive_per_run"]:
        if cell["looks"] == default and cell["steps"] == 50:
            assert cell["ci95"][1] < 0.1, cell


def test_the_claim_check_catches_numbers_that_break_a_claim(results: dict) -> None:
    default = results["settings"]["default_trend_looks"]
    broken = copy.deepcopy(results)
    cell = bench._pick(broken["false_positive_per_run"], rate=0.3, steps=50, looks=default)
    cell["ci95"][1] = bench.PER_RUN_FP_MAX + 0.01
    assert any("constant 30% over 50 steps" in f for f in bench.claim_failures(broken))
    broken = copy.deepcopy(results)
    bench._pick(broken["power"], looks=default, **{"from": 0.1, "to": 0.5})["ci95"][0] = 0.5
    assert any("not above" in f for f in bench.claim_failures(broken))


def test_the_readme_holds_the_rendering(results: dict) -> None:
    held = bench.readme_block(README.read_text())
    assert held is not None, (
        f"bench/learning/README.md has no {bench.BEGIN} ... {bench.END} block: paste the output of "
        "`.venv/bin/python bench/learning/verdict_error_rates.py --render` into it"
    )
    assert held == bench.render(results), (
        "bench/learning/README.md's block is stale: paste `bench/learning/verdict_error_rates.py --render`"
    )


def test_check_readme_tells_a_current_block_from_a_stale_or_missing_one(tmp_path: Path, capsys) -> None:
    rendered = tmp_path / "rendered.md"
    assert bench.main(["--render"]) == 0
    rendered.write_text("# README\n\n" + capsys.readouterr().out + "\nmore\n")
    assert bench.main(["--check-readme", str(rendered)]) == 0
    stale = tmp_path / "stale.md"
    stale.write_text(rendered.read_text().replace("%", "%%", 1))
    assert bench.main(["--check-readme", str(stale)]) == 1
    missing = tmp_path / "missing.md"
    missing.write_text("# README\n")
    assert bench.main(["--check-readme", str(missing)]) == 1
    assert "paste the output" in capsys.readouterr().err
