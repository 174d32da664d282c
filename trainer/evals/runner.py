"""The evaluation of one checkpoint on one suite: generate, score, write eval/outcomes.jsonl row by row, then
eval/report.json.

Rows go in batches of EVAL_BATCH_ROWS; a batch's outcomes are appended when it is scored, so a restarted
trainer keeps every complete row and generates from the first missing one. A row's sampling draws come from
seeds of its own (the suite's seed and the row's id), so the resumed evaluation's rows are the ones an
uninterrupted run would have written. Beside the outcomes, eval/outcomes.suite.json records the content hash
they were started with (and the seconds spent so far): outcomes of another suite content are discarded, not
mixed in.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from trainer.contract import RunLayout, join_uri, local_path, location_kind
from trainer.contract.run.eval_report import MAX_KEPT_TEXT, EvalReport, RowOutcome, summarize
from trainer.contract.spec.eval_suite import EVAL_BATCH_ROWS, EvalCheckpoint, EvalSampling, GenerationEngine, SuiteSpec
from trainer.storage import ArtifactStore, StorageError, store_for

from .builtin_suites import builtin_suite
from .scoring import score_row
from .suite import LoadedSuite, SuiteRow, load_user_suite

PROGRESS_FILE = "outcomes.suite.json"
Log = Callable[[str], None]


class Generator(Protocol):
    """What the evaluation needs of a model: its prompt for a question, and completions."""

    def prompt(self, question: str, template: dict[str, str]) -> str: ...

    def generate(
        self, prompts: list[str], seeds: list[int], sampling: EvalSampling, settled: Callable[[str], bool] | None
    ) -> list[tuple[str, list[str]]]:
        """Per prompt: the greedy completion and `sampling.samples` sampled ones."""
        ...


class Interrupted(Exception):
    """A stop was asked for between batches; the rows so far are kept."""


def load_suite(spec: SuiteSpec, work_dir: Path) -> LoadedSuite:
    """The suite a spec names, built in or the user's (DataError says what is wrong with it)."""
    return builtin_suite(spec.name) if spec.builtin else load_user_suite(spec, work_dir)


def row_seed(seed: int, row: SuiteRow) -> int:
    """A row's sampling seed: the same row gets the same draws in every evaluation with this seed."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{row.id}".encode()).digest()[:8], "big") >> 1


def progress_uri(layout: RunLayout) -> str:
    return join_uri(layout.eval_dir, PROGRESS_FILE)


def _read_run_file(store: ArtifactStore, uri: str, limit: int) -> bytes | None:
    """A file this run wrote earlier, read as untrusted: no symlink, at most `limit` bytes; None if absent."""
    if location_kind(uri) == "local" and Path(local_path(uri)).is_symlink():
        raise StorageError(f"{uri} is a symbolic link; the run directory's files must be plain files")
    found = [o for o in store.list(uri) if o.uri in (uri, local_path(uri))]
    if not found:
        return None
    if found[0].size_bytes > limit:
        raise StorageError(f"{uri} is {found[0].size_bytes} bytes, more than this suite's outcomes can take ({limit})")
    return store.read_bytes(uri)


def resume_outcomes(store: ArtifactStore, layout: RunLayout, suite: LoadedSuite) -> tuple[list[RowOutcome], float]:
    """The complete rows an earlier attempt wrote for this suite content, and the seconds it spent; the
    outcomes file is reset to them (a torn last line is dropped), or emptied when the content differs."""
    progress = _read_run_file(store, progress_uri(layout), 4096)
    started = None
    if progress is not None:
        try:
            started = json.loads(progress)
        except ValueError:
            started = None
    if not isinstance(started, dict) or started.get("content_hash") != suite.content_hash:
        store.delete(layout.eval_outcomes)
        store.write_bytes(progress_uri(layout), json.dumps({"content_hash": suite.content_hash, "generate_s": 0.0}).encode())
        return [], 0.0
    k = suite.sampling.samples
    data = _read_run_file(store, layout.eval_outcomes, len(suite.rows) * ((k + 2) * MAX_KEPT_TEXT * 6 + 65536)) or b""
    kept: list[RowOutcome] = []
    lines = data.split(b"\n")
    for line in lines:
        if len(kept) == len(suite.rows):
            break
        try:
            outcome = RowOutcome.model_validate_json(line)
        except ValidationError:
            break
        expected = suite.rows[len(kept)]
        if outcome.index != len(kept) or outcome.id != expected.id or list(outcome.functions) != suite.function_names:
            break
        kept.append(outcome)
    if sum(1 for line in lines if line.strip()) != len(kept):
        store.write_bytes(layout.eval_outcomes, b"".join(_line(o) for o in kept))
    generate_s = started.get("generate_s")
    return kept, float(generate_s) if isinstance(generate_s, (int, float)) else 0.0


def _line(outcome: RowOutcome) -> bytes:
    return (outcome.model_dump_json() + "\n").encode()


def _kept(text: str) -> str:
    return text[:MAX_KEPT_TEXT]


def evaluate_suite(
    suite: LoadedSuite,
    generator: Generator,
    *,
    layout: RunLayout,
    checkpoint: EvalCheckpoint,
    model_source: str,
    should_stop: Callable[[], str | None] = lambda: None,
    log: Log = print,
    clock: Callable[[], float] = time.monotonic,
    batch_rows: int = EVAL_BATCH_ROWS,
    engine: GenerationEngine = "transformers",
) -> EvalReport:
    """Generate and score every row not yet in the outcomes file, then write and return the report."""
    store = store_for(layout.root)
    outcomes, spent_s = resume_outcomes(store, layout, suite)
    if outcomes:
        log(f"resuming after {len(outcomes)} of {len(suite.rows)} rows already scored")
    unscored = 0
    for start in range(len(outcomes), len(suite.rows), batch_rows):
        if (why := should_stop()) is not None:
            raise Interrupted(f"stopped by {why} after {start} of {len(suite.rows)} rows")
        began = clock()
        batch = suite.rows[start : start + batch_rows]
        prompts = [generator.prompt(row.question, suite.template) for row in batch]
        completions = generator.generate(prompts, [row_seed(suite.sampling.seed, row) for row in batch], suite.sampling, suite.settled)
        written = []
        for offset, (row, prompt, (greedy, samples)) in enumerate(zip(batch, prompts, completions, strict=True)):
            scores = score_row(
                suite.rewards.functions,
                prompt=prompt,
                question=row.question,
                answers=row.answers,
                greedy=greedy,
                samples=samples,
                extractor=suite.answer,
            )
            unscored += scores.unscored
            written.append(
                RowOutcome(
                    id=row.id,
                    index=start + offset,
                    question=_kept(row.question),
                    answers=list(row.answers),
                    greedy=_kept(greedy),
                    samples=[_kept(s) for s in samples],
                    functions=scores.functions,
                )
            )
        store.append_bytes(layout.eval_outcomes, b"".join(_line(o) for o in written))
        outcomes.extend(written)
        spent_s += clock() - began
        store.write_bytes(progress_uri(layout), json.dumps({"content_hash": suite.content_hash, "generate_s": spent_s}).encode())
        log(f"rows {len(outcomes)}/{len(suite.rows)} scored ({spent_s:.1f} s)")
    if unscored:
        log(f"{unscored} completions could not be scored by a reward function (raised, or not a finite number): scored incorrect")
    report = build_report(
        suite, outcomes, checkpoint=checkpoint, model_source=model_source, generate_s=spent_s, layout=layout, engine=engine
    )
    store.write_bytes(layout.eval_report, report.model_dump_json(indent=2).encode())
    return report


def build_report(
    suite: LoadedSuite,
    outcomes: Sequence[RowOutcome],
    *,
    checkpoint: EvalCheckpoint,
    model_source: str,
    generate_s: float,
    layout: RunLayout,
    engine: GenerationEngine = "transformers",
) -> EvalReport:
    names = suite.function_names
    return EvalReport(
        suite=suite.identity(),
        checkpoint=checkpoint,
        model_source=model_source,
        n=len(outcomes),
        k=suite.sampling.samples,
        functions={name: summarize(outcomes, name) for name in names},
        primary=names[0],
        generate_s=round(generate_s, 3),
        outcomes_file=layout.eval_outcomes,
        engine=engine,
    )
