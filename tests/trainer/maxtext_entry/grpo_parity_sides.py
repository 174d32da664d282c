"""The two GRPO objectives test_grpo_parity_trl.py compares on one batch: rljob's (Tunix 0.1.7's `grpo_loss_fn` as a
job runs it) and TRL 1.16's (`GRPOTrainer`). Each returns the loss and its gradient with respect to the policy's
per-token log-probabilities.

On both sides the one function that turns the model into per-token log-probabilities is replaced by one that returns
a leaf (an nnx.Param; a torch tensor with requires_grad): the comparison is of everything after the model. Every other
line that runs is the installed libraries'. TRL is imported only when its side is built (torch and TRL take seconds).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tunix.rl import algo_core, common
from tunix.rl.grpo import grpo_learner

from trainer.contract import JobSpec
from trainer.maxtext_entry import grpo_objective
from trainer.stages.train import grpo_args, objective

PAD, EOS, UNK = 0, 1, 2
VOCAB = {"<pad>": PAD, "<eos>": EOS, "<unk>": UNK, "a": 3, "b": 4}
PROMPT = "a"


@dataclasses.dataclass(frozen=True)
class Batch:
    """One step's rollouts: `completions[i]` the tokens the sampler returned for row i (ending at EOS, or cut at
    `width`), G rows per prompt; per-token log-probs [rows, width], whatever they hold past a completion's end."""

    completions: list[list[int]]
    rewards: np.ndarray
    num_generations: int
    width: int  # max_completion_length: every completion padded to it
    policy_logps: np.ndarray
    old_logps: np.ndarray | None  # None: num_iterations 1, the policy's own (detached) on both sides
    ref_logps: np.ndarray
    dropped_rows: tuple[int, ...] = ()  # rows no token of which counts (TRL's mask_truncated_completions drops cut ones)

    def padded_ids(self) -> np.ndarray:
        return np.array([c + [PAD] * (self.width - len(c)) for c in self.completions])

    def completion_mask(self) -> np.ndarray:
        """Tunix's rule (grpo_learner: every token but padding), less the dropped rows."""
        mask = np.not_equal(self.padded_ids(), PAD)
        mask[list(self.dropped_rows)] = False
        return mask


# ------------------------------------------------------------------ rljob: Tunix with grpo_objective.py installed


class _LogpLeaf(nnx.Module):
    def __init__(self, logps: np.ndarray):
        self.logps = nnx.Param(jnp.asarray(logps, jnp.float32))


def _leaf_logps(graphdef: Any, state: Any, **_: Any) -> tuple[Any, Any]:
    """Stands in for common.compute_per_token_logps: the leaf's values, and logits only the logged entropy reads."""
    logps = nnx.merge(graphdef, state).logps[...]
    return logps, jnp.zeros((*logps.shape, 2))


def tunix_loss_and_grad(spec: JobSpec, batch: Batch, monkeypatch: pytest.MonkeyPatch) -> tuple[float, np.ndarray]:
    """grpo_loss_fn with the GrpoConfig train_rl builds from the job's rl.* arguments, grpo_objective.py installed from
    the spec (what train_rl_entry installs), and the TrainExample grpo_learner assembles."""
    for name in ("GRPOConfig", "GrpoConfig"):
        monkeypatch.setattr(grpo_learner, name, getattr(grpo_learner, name))  # restored after the test
    monkeypatch.setattr(common, "compute_kl_divergence", common.compute_kl_divergence)
    monkeypatch.setattr(common, "compute_per_token_logps", _leaf_logps)
    goal = objective(spec)
    grpo_objective.install(goal.kl_loss_mode, goal.epsilon_high)
    rl = dict(arg.split("=", 1) for arg in grpo_args(spec) if arg.startswith("rl."))
    config = grpo_learner.GrpoConfig(  # train_rl.py's own call, from the arguments MaxText parsed
        num_generations=int(rl["rl.num_generations"]),
        num_iterations=int(rl["rl.num_iterations"]),
        beta=float(rl["rl.grpo_beta"]),
        epsilon=float(rl["rl.grpo_epsilon"]),
        loss_algo=rl["rl.loss_algo"],
        loss_agg_mode=rl["rl.loss_agg_mode"],
    )
    config.temperature = 1.0  # the learner sets it from the rollout config; the leaf's log-probs are already scaled
    ids = batch.padded_ids()
    example = grpo_learner.TrainExample(  # grpo_learner._generate_and_compute_advantage's fields
        prompt_ids=jnp.full((len(ids), 1), VOCAB[PROMPT]),
        prompt_mask=jnp.ones((len(ids), 1), bool),
        completion_ids=jnp.asarray(ids),
        completion_mask=jnp.asarray(batch.completion_mask()),
        ref_per_token_logps=jnp.asarray(batch.ref_logps) if config.beta != 0.0 else None,
        advantages=jnp.asarray(algo_core.compute_advantages(batch.rewards, config.num_generations)),
        old_per_token_logps=None if batch.old_logps is None else jnp.asarray(batch.old_logps),
    )

    def loss(leaf: _LogpLeaf) -> Any:
        return algo_core.grpo_loss_fn(leaf, example, config, PAD, EOS)[0]

    value, grads = nnx.value_and_grad(loss)(_LogpLeaf(batch.policy_logps))
    return float(value), np.asarray(grads.logps[...])


# ------------------------------------------------------------------ TRL 1.16: a real GRPOTrainer


class TrlGrpo:
    """Builds GRPOTrainers on a tiny random Llama saved under `root` (a path, so that beta > 0 can load the reference
    model the way TRL does). The model's weights never matter: every log-prob comes from the batch."""

    def __init__(self, root: Path):
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

        self.root = root
        self.tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(WordLevel(VOCAB, unk_token="<unk>")), pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
        )
        shape = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
        config = LlamaConfig(vocab_size=len(VOCAB), pad_token_id=PAD, eos_token_id=EOS, **shape)
        LlamaForCausalLM(config).save_pretrained(root / "model")

    def trainer(self, batch: Batch, **args: Any) -> Any:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        rows = len(batch.completions)
        config = GRPOConfig(
            output_dir=str(self.root / "out"),
            report_to=[],
            use_cpu=True,
            per_device_train_batch_size=rows,  # the whole batch in one step: no gradient accumulation
            num_generations=batch.num_generations,
            max_completion_length=batch.width,
            **args,
        )
        trainer = GRPOTrainer(
            model=str(self.root / "model"),
            reward_funcs=lambda completions, **_: [0.0] * len(completions),  # replaced by the batch's rewards
            args=config,
            train_dataset=Dataset.from_dict({"prompt": [PROMPT] * rows}),
            processing_class=self.tokenizer,
        )
        trainer.current_gradient_accumulation_steps = 1  # what Trainer's training loop sets, for one step
        return trainer

    def inputs(self, trainer: Any, batch: Batch) -> dict[str, Any]:
        """What `_generate_and_score_completions` makes of the batch: masks, advantages, the token count DAPO divides
        by, and the old and reference log-probs it asks the model for (here, the batch's)."""
        import torch

        def logps_of(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, **_: Any) -> tuple[Any, None, None]:
            source = batch.ref_logps if model is trainer.ref_model else batch.old_logps
            return torch.tensor(source), None, None

        trainer._generate_single_turn = lambda *_, **__: ([list(c) for c in batch.completions], None)
        trainer._calculate_rewards = lambda *_: torch.tensor(batch.rewards, dtype=torch.float32)[:, None]
        trainer._get_per_token_logps_and_entropies = logps_of
        return trainer._generate_and_score_completions([{"prompt": PROMPT}] * len(batch.completions))

    def loss_and_grad(self, trainer: Any, inputs: dict[str, Any], batch: Batch, **overrides: Any) -> tuple[float, np.ndarray]:
        """`compute_loss` on `inputs` (with `overrides`), the policy's log-probs a leaf; its value and gradient."""
        import torch

        leaf = torch.tensor(batch.policy_logps, dtype=torch.float32, requires_grad=True)
        entropies = torch.zeros_like(leaf)
        trainer._get_per_token_logps_and_entropies = lambda *_, **__: (leaf, entropies, None)
        loss = trainer.compute_loss(trainer.model, {**inputs, **overrides})
        loss.backward()
        assert leaf.grad is not None
        return float(loss.detach()), leaf.grad.numpy()
