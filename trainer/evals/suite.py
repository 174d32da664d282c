"""A suite as the trainer loaded it, its content hash, and the loading of a user suite.

The content hash covers exactly what decides the scores: every row's question and acceptable answers in
order, each reward file's bytes and the functions called, the prompt template's content (MaxText's default
one's too, read from the installed MaxText), the answer extractor and the sampling. Where the files came
from does not count: the same content at another path is the same suite version.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract import local_path, location_kind
from trainer.contract.run.evaluation import row_id
from trainer.contract.spec.eval_suite import MAX_SUITE_ROWS, AnswerExtractor, EvalSampling, SuiteIdentity, SuiteSpec
from trainer.sources import DataError, check_prompt_template
from trainer.stages.maxtext_paths import maxtext_configs_dir
from trainer.storage import store_for

from .prompts import acceptable_answers
from .suite_rewards import SandboxedRewards, start_sandboxed_rewards

MAX_SUITE_FILE_BYTES = 256 << 20  # rows: 20,000 GSM8K-size rows are ~10 MB of JSON lines
MAX_REWARD_FILE_BYTES = 4 << 20
MAX_TEMPLATE_BYTES = 1 << 20
MAX_QUESTION_CHARS = 100_000
DEFAULT_TEMPLATE = "examples/chat_templates/gsm8k_rl.json"  # under the installed maxtext package (rl.yml's data_template_path)
RewardFn = Callable[..., Any]


@dataclass(frozen=True)
class SuiteRow:
    question: str
    answers: tuple[str, ...]  # acceptable answers, as reward functions get them (prompts.acceptable_answers)

    @property
    def id(self) -> str:
        return row_id(self.question)


@dataclass(frozen=True)
class RewardFile:
    source: bytes  # the file's bytes, hashed
    functions: dict[str, RewardFn]  # name -> the function (a built-in's) or its sandbox stand-in (a user suite's), in order
    sandbox: SandboxedRewards | None = None  # a user suite's: the worker its functions run in

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()


@dataclass(frozen=True)
class LoadedSuite:
    name: str
    builtin: bool
    rows: tuple[SuiteRow, ...]
    rewards: RewardFile
    template: dict[str, str]
    answer: AnswerExtractor
    sampling: EvalSampling
    # For a built-in whose rewards read only what is settled early (arith's first number): stop a completion
    # once more text cannot change any score. None: generate to a stop token or max_new_tokens.
    settled: Callable[[str], bool] | None = None

    @property
    def function_names(self) -> list[str]:
        return list(self.rewards.functions)

    @property
    def content_hash(self) -> str:
        return suite_content_hash(self.rows, self.rewards, self.template, self.answer, self.sampling)

    def identity(self) -> SuiteIdentity:
        return SuiteIdentity(
            name=self.name,
            builtin=self.builtin,
            content_hash=self.content_hash,
            rows=len(self.rows),
            reward_functions=self.function_names,
            sampling=self.sampling,
        )


def suite_content_hash(
    rows: tuple[SuiteRow, ...], rewards: RewardFile, template: dict[str, str], answer: AnswerExtractor, sampling: EvalSampling
) -> str:
    """sha256 (first 16 hex) of a canonical JSON of the suite's content."""
    content = {
        "rows": [[row.question, list(row.answers)] for row in rows],
        "rewards": {"sha256": hashlib.sha256(rewards.source).hexdigest(), "functions": list(rewards.functions)},
        "template": template,
        "answer": answer,
        "sampling": sampling.model_dump(mode="json"),
    }
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def read_bounded(uri: str, limit: int, what: str) -> bytes:
    """A user file's bytes, refused above `limit` before it is read. Missing: DataError; storage: StorageError."""
    store = store_for(uri)
    target = local_path(uri) if location_kind(uri) == "local" else uri
    found = [o for o in store.list(uri) if o.uri in (uri, target)]
    if not found:
        raise DataError(f"{what} {uri} does not exist")
    if found[0].size_bytes > limit:
        raise DataError(f"{what} {uri} is {found[0].size_bytes} bytes; at most {limit} are read")
    return store.read_bytes(uri)


def parse_rows(data: bytes, uri: str) -> tuple[SuiteRow, ...]:
    """Rows of `question` and `answer` (GSM8K's `#### N` last line, or a plain answer), at most MAX_SUITE_ROWS,
    questions distinct (a row is paired with another evaluation's by its question)."""
    records = _records(data, uri)
    if not records:
        raise DataError(f"{uri} holds no rows")
    rows = []
    seen: dict[str, int] = {}
    for index, record in enumerate(records):
        question, answer = record.get("question"), record.get("answer")
        if isinstance(answer, (int, float)) and not isinstance(answer, bool) and math.isfinite(answer):
            answer = str(answer)
        if not isinstance(question, str) or not question.strip() or not isinstance(answer, str) or not answer.strip():
            raise DataError(f"{uri} row {index}: needs a non-empty text `question` and `answer` (GSM8K's '#### N' or a plain answer)")
        if len(question) > MAX_QUESTION_CHARS:
            raise DataError(f"{uri} row {index}: the question is longer than {MAX_QUESTION_CHARS} characters")
        row = SuiteRow(question=question, answers=tuple(acceptable_answers(answer)))
        if row.id in seen:
            raise DataError(f"{uri} rows {seen[row.id]} and {index} ask the same question; each row must be distinct")
        seen[row.id] = index
        rows.append(row)
    return tuple(rows)


def _records(data: bytes, uri: str) -> list[dict[str, Any]]:
    if uri.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(io.BytesIO(data))
            if parquet.metadata.num_rows > MAX_SUITE_ROWS:
                raise DataError(f"{uri} has {parquet.metadata.num_rows} rows; a suite holds at most {MAX_SUITE_ROWS}")
            missing = [c for c in ("question", "answer") if c not in parquet.schema_arrow.names]
            if missing:
                raise DataError(f"{uri} lacks column(s) {missing}; a suite's rows need 'question' and 'answer'")
            records: list[dict[str, Any]] = parquet.read(columns=["question", "answer"]).to_pylist()
            return records
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{uri} is not readable as parquet: {e}") from e
    try:
        lines = [line for line in data.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as e:
        raise DataError(f"{uri} is not UTF-8 text: {e}") from e
    if len(lines) > MAX_SUITE_ROWS:
        raise DataError(f"{uri} has {len(lines)} rows; a suite holds at most {MAX_SUITE_ROWS}")
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError as e:
            raise DataError(f"{uri} line {number} is not JSON: {e}") from e
        if not isinstance(record, dict):
            raise DataError(f"{uri} line {number} is not a JSON object with question and answer")
        records.append(record)
    return records


def sandboxed_rewards(source: bytes, path: Path, spec: SuiteSpec, origin: str) -> RewardFile:
    """The suite's reward functions from the file at `path` (its bytes are `source`), loaded in a reward sandbox worker
    (suite_rewards.py): user code never runs in the eval job's own process."""
    sandbox = start_sandboxed_rewards(str(path), spec, origin)
    return RewardFile(source=source, functions=dict(sandbox.functions), sandbox=sandbox)


def load_template(uri: str | None) -> dict[str, str]:
    """The suite's prompt template, or MaxText's GSM8K default (what train_rl uses without one)."""
    if uri is None:
        path = maxtext_configs_dir().parent / DEFAULT_TEMPLATE
        if not path.is_file():
            raise DataError(f"MaxText's default prompt template {path} is not installed; give the suite a prompt_template")
        uri = str(path)
    data = read_bounded(uri, MAX_TEMPLATE_BYTES, "the prompt template")
    check_prompt_template(uri)
    template = json.loads(data)
    return {"SYSTEM_PROMPT": template["SYSTEM_PROMPT"], "TEMPLATE": template["TEMPLATE"]}


def load_user_suite(spec: SuiteSpec, work_dir: Path) -> LoadedSuite:
    """Read a user suite's rows, reward file and template (local or gs://); DataError says what is wrong."""
    if spec.data is None or spec.rewards_path is None:
        raise DataError(f"{spec.name} is not a user suite")
    rows = parse_rows(read_bounded(spec.data, MAX_SUITE_FILE_BYTES, "the suite's rows"), spec.data)
    source = read_bounded(spec.rewards_path, MAX_REWARD_FILE_BYTES, "the reward file")
    if location_kind(spec.rewards_path) == "local":
        path = Path(local_path(spec.rewards_path))
    else:
        path = work_dir / "inputs" / "suite" / Path(spec.rewards_path).name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(source)
    template = load_template(spec.prompt_template)  # before the worker starts: a bad template leaves nothing running
    rewards = sandboxed_rewards(source, path, spec, spec.rewards_path)
    return LoadedSuite(
        name=spec.name,
        builtin=False,
        rows=rows,
        rewards=rewards,
        template=template,
        answer=spec.answer,
        sampling=spec.sampling,
    )
