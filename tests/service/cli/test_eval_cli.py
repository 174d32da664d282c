"""`rljob eval`, `rljob eval-compare` and `rljob diff` on two evals, in-process (typer's CliRunner) against the app on
loopback with fakes at the launcher and progress ports; the stand-in eval trainer (eval_runs.py) finishes each eval
while `rljob eval --follow` follows it. What must be printed: the scores with their CIs, and against a baseline the
paired difference "pass@1 +x.x points [lo, hi] 95% CI, McNemar p=..., n=..."; refusals are messages, not tracebacks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner, Result

from harness.live_server import served
from service.adapters.store import SqlJobStore
from service.app import create_app
from service.cli.main import app as rljob_cli
from tests.service.conftest import Api, add_test_tokens
from tests.service.eval_runs import finish_eval, outcome_rows, suite_hash
from tests.service.service_fakes import FakeLauncher, FakeProgress
from tests.service.service_helpers import TOKEN_A, wait_until

N = 40
BASE = [int(i < 10) for i in range(N)]  # 10/40 right
TRAINED = [int(2 <= i < 22) for i in range(N)]  # 20/40: 12 rows gained, 2 lost
CONTENT = suite_hash("arith rows")


@pytest.fixture
def served_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings_factory: Any) -> Iterator[tuple[str, Api]]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RLJOB_CONFIG", raising=False)
    store = SqlJobStore(f"sqlite:///{tmp_path / 'rljob.db'}")
    store.migrate()
    add_test_tokens(store)
    launcher, progress = FakeLauncher(), FakeProgress()
    with served(create_app(settings_factory(), store=store, launcher=launcher, progress=progress)) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            yield url, Api(client, store, launcher, progress)  # type: ignore[arg-type]  # httpx.Client reads as TestClient
    store.close()


def _cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(rljob_cli, ["--url", url, "--token", TOKEN_A, *args], catch_exceptions=False)


def _finish_next_eval(api: Api, rows: list[int], out: Path, known: set[str]) -> threading.Thread:
    """Finish the next eval that appears (the one `rljob eval --follow` submits), as its trainer would."""

    def run() -> None:
        found: list[str] = []

        def appeared() -> bool:
            ids = [e["id"] for e in api.client.get("/v1/evals", headers=api.as_(TOKEN_A)).json()["data"]]
            found[:] = [i for i in ids if i not in known]
            return bool(found)

        wait_until(appeared)
        finish_eval(api, found[0], outcome_rows(rows), content_hash=CONTENT, builtin=True, output=out)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_eval_wait_prints_scores_and_the_paired_difference_and_diff_shows_evals_side_by_side(
    served_api: tuple[str, Api], tmp_path: Path
) -> None:
    url, api = served_api
    out = tmp_path / "runs"
    finisher = _finish_next_eval(api, BASE, out, set())
    base = _cli(url, "eval", "/models/base", "--suite", "arith", "--run-output", str(out), "--follow")
    finisher.join(30)
    assert base.exit_code == 0, base.output
    base_id = base.output.split("submitted ")[1].split()[0]
    text = _one_line(base.output)
    assert "arith v1 (builtin, hash " + CONTENT + ")" in text and "n=40" in text
    assert "25.0% [14.2, 40.2]" in text  # pass@1 10/40 with its Wilson 95% interval

    # A suite file, against the baseline: the comparison is printed once both have finished.
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(yaml.safe_dump({"name": "arith"}))
    finisher = _finish_next_eval(api, TRAINED, out, {base_id})
    # --wait, the old name of --follow, still follows, and says so
    trained = _cli(url, "eval", "/models/trained", "--suite", str(suite_file), "--run-output", str(out), "--baseline", base_id, "--wait")
    finisher.join(30)
    assert trained.exit_code == 0, trained.output
    assert "--wait is now --follow" in trained.output
    trained_id = trained.output.split("submitted ")[1].split()[0]
    compared = api.client.get(f"/v1/evals/{trained_id}/compare", headers=api.as_(TOKEN_A)).json()["comparison"]
    pass1 = next(s for s in compared["scores"] if s["score"] == "pass@1")
    low, high = (bound * 100 for bound in pass1["ci95"])
    line = f"pass@1 +25.0 points [{low:+.1f}, {high:+.1f}] 95% CI, McNemar p={pass1['mcnemar_p']:.3g}, n=40"
    assert line in _one_line(trained.output)
    assert pass1["a_only"] == 12 and pass1["b_only"] == 2

    assert line in _one_line(_cli(url, "eval-compare", trained_id, base_id).output)
    side_by_side = _cli(url, "diff", trained_id, base_id)
    assert side_by_side.exit_code == 0 and line in _one_line(side_by_side.output)
    assert "50.0%" in side_by_side.output and "25.0%" in side_by_side.output  # both evals' pass@1, side by side


def test_eval_refusals_are_messages(served_api: tuple[str, Api], tmp_path: Path) -> None:
    url, _ = served_api
    missing = _cli(url, "eval", "rl-000000000000:export", "--suite", "arith")
    assert missing.exit_code == 2 and "checkpoint: no job rl-000000000000 visible to your team" in _one_line(missing.output)
    bad_suite = tmp_path / "bad.yaml"
    bad_suite.write_text(yaml.safe_dump({"name": "mine", "data": "/d/rows.csv"}))
    refused = _cli(url, "eval", "/models/tiny", "--suite", str(bad_suite), "--run-output", str(tmp_path))
    assert refused.exit_code == 2 and "invalid suite" in refused.output and "Traceback" not in refused.output
    not_evals = _cli(url, "eval-compare", "rl-000000000000", "rl-111111111111")
    assert not_evals.exit_code == 1 and "no job 'rl-000000000000' visible to your team" in _one_line(not_evals.output)
