"""bench/learning/shared_stream.py and bench/learning/peer_trl.py's unshuffled mode: the peer comparison of issue 66 §4
gives TRL the rows in the order rljob's job trains on them. That rljob's order is the real job's is held by
tests/trainer/test_slow_learning.py; here, that TRL's own sampler, built as GRPOTrainer builds it from the config
peer_trl.py gives it, hands each step the stream's next batch, and that a filtered prompt leaves its place empty."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from bench.learning import peer_trl
from bench.learning.shared_stream import data_shuffle_seed, spec_batches, train_batches

GRPO = {
    "batch_size": 2,
    "num_generations": 8,
    "max_prefill_predict_length": 80,
    "max_target_length": 112,
    "temperature": 0.7,
    "top_k": 50,
    "top_p": 1.0,
    "beta": 0.04,
    "epsilon": 0.2,
    "epsilon_high": None,
    "learning_rate": 3e-06,
    "warmup_steps_fraction": 0.1,
    "kl_estimator": "k3",
    "loss_agg_mode": "sequence-mean-token-mean",
}
STEPS = 40


def _trl_steps(shuffle: bool, rows: int, tmp_path: Path) -> list[list[int]]:
    """Each step's distinct row indices as TRL 1.16's GRPOTrainer draws them: its own _get_train_sampler on the config."""
    from trl import GRPOTrainer

    config = peer_trl.trl_config(GRPO, STEPS, tmp_path, seed=3, shuffle=shuffle)
    trainer = SimpleNamespace(
        train_dataset=list(range(rows)),
        num_generations=config.num_generations,
        num_iterations=config.num_iterations,
        shuffle_dataset=config.shuffle_dataset,
        args=config,
    )
    order = list(GRPOTrainer._get_train_sampler(trainer))
    per_step = config.per_device_train_batch_size * config.steps_per_generation
    return [list(dict.fromkeys(order[i : i + per_step])) for i in range(0, STEPS * per_step, per_step)]


def test_trl_unshuffled_trains_each_step_on_the_streams_next_batch(tmp_path):
    spec = {"seed": 3, "dataset": {"shuffle_seed": None}, "grpo": {"num_batches": STEPS, "batch_size": 2}}
    batches = spec_batches(spec, [True] * 150)
    stream = [i for batch in batches for i in batch]  # the rows file handed to TRL, in this order
    assert data_shuffle_seed(spec) == 3 and len(stream) == STEPS * 2 and stream != sorted(stream)
    trl = _trl_steps(False, len(stream), tmp_path)
    assert [[stream[i] for i in step] for step in trl] == batches
    shuffled = _trl_steps(True, len(stream), tmp_path)  # TRL's default would train on another order
    assert [[stream[i] for i in step] for step in shuffled] != batches


def test_a_prompt_too_long_leaves_its_place_in_the_first_rows_empty():
    """train_rl slices after filtering: the job trains on fewer rows, not on the next one (drop_remainder may then take
    a step away)."""
    fits = [True] * 10
    every = train_batches(fits, seed=3, num_batches=2, batch_size=2)
    dropped = every[0][1]
    fits[dropped] = False
    fewer = train_batches(fits, seed=3, num_batches=2, batch_size=2)
    assert sum(len(b) for b in fewer) < sum(len(b) for b in every) and all(dropped not in b for b in fewer)
    assert data_shuffle_seed({"seed": None, "dataset": {}}) == 42 and data_shuffle_seed({"seed": 5, "dataset": {"shuffle_seed": 9}}) == 9
