"""The rows an rljob job trains on, step by step, so that a peer can be handed the same stream (issue 66 §4).

train_rl orders a job's train files with grain (MaxText 0.2.5, maxtext/trainers/post_train/rl/train_rl.py,
prepare_datasets, the train_files branch, lines 218-258):

    grain.MapDataset.source(rows).shuffle(seed=data_shuffle_seed).map(process_data)
        .filter(prompt tokens <= max_prefill_predict_length)[:num_batches * batch_size * train_fraction]
        .repeat(num_epoch).to_iter_dataset().batch(batch_size, drop_remainder=True)

rljob runs it with train_fraction and num_epoch 1 (trainer/stages/train.py) and data_shuffle_seed from the spec
(dataset.shuffle_seed, else the job's seed, else rl.yml's 42: trainer/contract/spec/rl_settings.py). The same grain calls
on the rows' indices give the order. One consequence of the slice coming after the filter: a prompt too long for
max_prefill_predict_length takes a place among the first num_batches x batch_size and leaves it empty, so the job
trains on fewer rows (and, with drop_remainder, possibly fewer steps) rather than on the next row.

tests/trainer/test_slow_learning.py holds this order to what a real job's samples show it trained on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_SHUFFLE_SEED = 42  # rl.yml's data_shuffle_seed


def data_shuffle_seed(spec: dict[str, Any]) -> int:
    """The seed train_rl shuffles the rows with, as trainer/stages/train.py passes it."""
    shuffle_seed = (spec.get("dataset") or {}).get("shuffle_seed")
    if shuffle_seed is not None:
        return int(shuffle_seed)
    return int(spec["seed"]) if spec.get("seed") is not None else DEFAULT_SHUFFLE_SEED


def train_batches(fits: Sequence[bool], seed: int, num_batches: int, batch_size: int) -> list[list[int]]:
    """The row indices of each train step's batch, in train_rl's order; `fits[i]`: row i's prompt is within
    max_prefill_predict_length tokens (train_rl drops it otherwise)."""
    import grain

    size = num_batches * batch_size  # train_fraction 1
    stream = grain.MapDataset.source(list(range(len(fits)))).shuffle(seed=seed).filter(lambda i: bool(fits[i]))
    batches = stream[:size].repeat(1).to_iter_dataset().batch(batch_size, drop_remainder=True)
    return [[int(i) for i in batch] for batch in batches]


def spec_batches(spec: dict[str, Any], fits: Sequence[bool]) -> list[list[int]]:
    grpo = spec["grpo"]
    return train_batches(fits, data_shuffle_seed(spec), grpo["num_batches"], grpo["batch_size"])


def fold_stream(fold: Path, model: Path, spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """A learning fold's rows in the order `spec`'s job trains on them, and each step's prompts as train_rl builds
    them (what a peer given the rows unshuffled must show its reward calls). The fold holds the rows twice, as
    train.parquet (the job's) and train.jsonl (the peer's): refused unless in one order."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from bench.learning.arith_difficulty import train_rl_rows

    rows = [json.loads(line) for line in (fold / "train.jsonl").read_text().splitlines()]
    if [r["question"] for r in pq.read_table(str(fold / "train.parquet")).to_pylist()] != [r["question"] for r in rows]:
        raise SystemExit(f"{fold}: train.parquet (the job's) and train.jsonl (the peer's) hold the rows in different orders")
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    processed = train_rl_rows(rows, tokenizer, fold / "arith-one-shot.json")
    limit = spec["grpo"]["max_prefill_predict_length"]
    fits = [len(tokenizer.tokenize(r["prompts"])) <= limit for r in processed]  # train_rl's _filter_long_prompts
    batches = spec_batches(spec, fits)
    return [rows[i] for batch in batches for i in batch], [[processed[i]["prompts"] for i in batch] for batch in batches]
