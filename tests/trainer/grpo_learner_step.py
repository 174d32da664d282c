"""The training example one GRPO step builds, as train_rl builds it: Tunix's own `GRPOLearner._generate_and_compute_advantage`
(which calls `RLCluster.generate` and makes the completion mask) on a real RLCluster and GRPOLearner, with whatever
wrappers are installed on them (trainer/rollout/stop_token.py). Only the rollout engine is a stand-in: it returns
set completions, each as Tunix's sampler returns one, up to but excluding its first EOS.

`python -m tests.trainer.grpo_learner_step` runs the entry shim's main (trainer/maxtext_entry/train_rl_entry.py) with this
step in the place of MaxText's train_rl, and prints the step as one JSON line after STEP_LINE_PREFIX.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

EOS = PAD = 2  # SmolLM2's <|im_end|>; Tunix makes Llama 3's pad its EOS
WIDTH = 4  # max_tokens_to_generate
# Two groups of two: stopped after two tokens, stopped at once (EOS first), ran out of tokens, stopped after one.
COMPLETIONS = ([5, 6], [], [5, 6, 7, 8], [9])
PROMPT = [PAD, 1, 5, EOS]  # left padding, then a chat prompt ending on its end-of-turn token (== pad)
STEP_LINE_PREFIX = "GRPO_LEARNER_STEP "


class Words:
    """A tokenizer as Tunix's TokenizerAdapter takes one: ids written as words."""

    def encode(self, text: str, **_: Any) -> list[int]:
        return [int(word) for word in text.split()]

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self) -> int:
        return 1

    def eos_id(self) -> int:
        return EOS

    def pad_id(self) -> int:
        return PAD


def learner_step(completions: Sequence[Sequence[int]] = COMPLETIONS) -> dict[str, Any]:
    """The example and the metrics of one `_generate_and_compute_advantage` on `completions` (one per prompt)."""
    import jax
    import numpy as np
    import optax
    from flax import nnx
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    class Actor(nnx.Module):  # never run: no reference model (beta 0) and one iteration need no log-probs
        def __init__(self) -> None:
            self.embed = nnx.Embed(16, 4, rngs=nnx.Rngs(0))

    class SetCompletions(base_rollout.BaseRollout):  # type: ignore[misc]
        def __init__(self, rollout_actor: Any, **_: Any) -> None:
            self.actor = rollout_actor

        def generate(self, prompts: list[str], rollout_config: Any, **_: Any) -> Any:
            tokens = [np.asarray(completions[i], dtype=np.int32) for i in range(len(prompts))]
            return base_rollout.RolloutOutput(
                text=[Words().decode(t) for t in tokens],
                logits=[],
                tokens=tokens,
                left_padded_prompt_tokens=np.asarray([PROMPT] * len(prompts)),
                logprobs=None,
            )

        def get_per_token_logps(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("no log-probs are needed with beta 0 and one iteration")

        def update_params(self, *args: Any, **kwargs: Any) -> None:
            pass

        def pad_id(self) -> int:
            return PAD

        def eos_id(self) -> int:
            return EOS

        def model(self) -> Any:
            return self.actor

    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("fsdp",))
    role = rl_cluster_lib.Role
    n = len(completions)
    cluster = rl_cluster_lib.RLCluster(
        actor=Actor(),
        tokenizer=Words(),
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={role.ACTOR: mesh, role.REFERENCE: mesh, role.ROLLOUT: mesh},
            rollout_engine=SetCompletions,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optax.sgd(0.1),
                eval_every_n_steps=10,
                max_steps=1,
                rollout_micro_batch_size=n,
                compute_logps_micro_batch_size=n,
            ),
            rollout_config=base_rollout.RolloutConfig(max_tokens_to_generate=WIDTH, max_prompt_length=len(PROMPT)),
        ),
    )
    metrics: dict[str, float] = {}
    buffer_metrics = cluster.buffer_metrics

    def _buffer_metrics(values: dict[str, Any], mode: Any = rl_cluster_lib.Mode.TRAIN) -> None:
        metrics.update({name: float(np.asarray(value)) for name, (value, _) in values.items() if np.ndim(value) == 0})
        buffer_metrics(values, mode=mode)

    cluster.buffer_metrics = _buffer_metrics
    learner = grpo_learner.GRPOLearner(
        cluster, grpo_learner.GRPOConfig(num_generations=2, beta=0.0), reward_fns=lambda prompts, **_: [1.0] * len(prompts)
    )
    example = learner._generate_and_compute_advantage({"prompts": [f"prompt {i}" for i in range(n)]})
    return {
        "completion_ids": np.asarray(example.completion_ids).tolist(),
        "completion_mask": np.asarray(example.completion_mask).astype(int).tolist(),
        "prompt_mask": np.asarray(example.prompt_mask).astype(int).tolist(),
        "metrics": metrics,
    }


def _in_train_rls_place(module: str, maxtext_argv: list[str]) -> None:
    print(STEP_LINE_PREFIX + json.dumps({"module": module, **learner_step()}), flush=True)


if __name__ == "__main__":
    from trainer.maxtext_entry import train_rl_entry

    train_rl_entry.run_as_main = _in_train_rls_place  # what main runs once every wrapper is installed
    train_rl_entry.main(sys.argv[1:])
