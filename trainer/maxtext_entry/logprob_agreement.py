"""Sampler-trainer agreement on every train step: the rollout engine's log-probabilities of the tokens it sampled
against the trainer's own forward pass over the same tokens (issue 66 §2).

GRPO's ratio and KL take the trainer's log-probabilities as the policy that sampled the batch; when the engine that
sampled computes them differently (another kernel, bf16 on the matrix units, another micro-batch shape), the gradient
is biased without any error (Tunix's TPU bring-up measured 0.011 -> 0.070 nats/token from the batch shape alone).
This install measures the difference where it arises, in the step's own rollout:
1. `RLCluster.generate` in train mode asks the engine for the log-probability of each token it sampled (Tunix's
   sampler computes it from the same logits it samples from, after the temperature: generate/sampler.py
   sample_top_p) and keeps them for this thread;
2. `GRPOLearner._generate_and_compute_advantage` then runs the trainer's forward over the batch it built
   (`read_trainer_logps`: Tunix's jitted `common.compute_per_token_logps` on the MaxText model the update
   differentiates, at the actor's current weights) and compares the two on the tokens the sampler returned (the EOS
   rljob appends, stop_token.py, has no sampled log-probability).
The step's `sampler_trainer/*` metrics are Tunix's own diagnostic (`log_sampler_trainer_agreement`, which only its
agentic learner has; train_rl's GRPO learner is not that one): the log-probabilities' mean and largest absolute
difference, the probabilities', and the probabilities' Pearson correlation, over the sampled tokens. Both sides are
at the rollout's temperature (compute_per_token_logps divides the logits as the sampler does). One extra forward
pass per step, as Tunix's costs, and nothing more: Tunix's `RLCluster.get_actor_per_token_logps`, which the first
version called, reads the "anchor" weights Tunix snapshots at each weight sync (train_rl with a shared engine never
syncs, so they were the initial ones until this code overwrote them) and ends with a full `gc.collect()`
(rl_cluster.py in Tunix 0.1.7), 0.66 s a step on the CPU here and most of the 0.31 s a step the chip's GSM8K jobs
waited in `logprobs` (bench/chip/README.md). The forward and its host read are timed as `logprobs`
(goodput_recorder.py wraps `read_trainer_logps`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

PREFIX = "sampler_trainer/"
# name -> how a step's micro-batches reduce it: Tunix's own diagnostic's names and reductions
# (tunix/rl/agentic/agentic_grpo_learner.py, `log_sampler_trainer_agreement`, which only the agentic learner has)
METRICS = {
    "logp_diff_mean": np.mean,
    "logp_diff_max": np.max,
    "prob_diff_mean": np.mean,
    "prob_diff_max": np.max,
    "probs_pearson_corr": np.mean,
}
_last = threading.local()  # the log-probabilities RLCluster.generate returned last in this thread, or None


def agreement(sampled: Sequence[np.ndarray], trainer: np.ndarray) -> dict[str, float] | None:
    """Over every sampled token (row i's first len(sampled[i]) positions of `trainer`, [batch, completion
    positions]): the log-probabilities' absolute difference, the probabilities' (a low-probability token's log can
    differ by a lot while its weight in the ratio is nil) and the probabilities' Pearson correlation, as Tunix's
    agentic learner defines them but for its floor (below). None when no token was sampled."""
    rows = [(np.asarray(s, np.float64), np.asarray(trainer[i, : len(s)], np.float64)) for i, s in enumerate(sampled) if len(s)]
    if not rows:
        return None
    engine = np.concatenate([s for s, _ in rows])
    ours = np.concatenate([t for _, t in rows])
    diff, engine_p, ours_p = np.abs(engine - ours), np.exp(engine), np.exp(ours)
    prob_diff = np.abs(engine_p - ours_p)
    engine_d, ours_d = engine_p - engine_p.mean(), ours_p - ours_p.mean()
    # Tunix floors the variances' product at 1e-12, which sets the correlation near 0 whenever the sampled tokens'
    # probabilities are all small (a 128k vocabulary's early steps: variances ~1e-20); only a product of exactly 0
    # (one side constant) leaves it undefined here, and then it is left out.
    variance = float(np.mean(engine_d**2) * np.mean(ours_d**2))
    found = {
        "logp_diff_mean": float(diff.mean()),
        "logp_diff_max": float(diff.max()),
        "prob_diff_mean": float(prob_diff.mean()),
        "prob_diff_max": float(prob_diff.max()),
    }
    if variance > 0:
        found["probs_pearson_corr"] = float(np.mean(engine_d * ours_d) / np.sqrt(variance))
    return found


def as_tunix_metrics(found: dict[str, float]) -> dict[str, tuple[float, Any]]:
    """In buffer_metrics' form."""
    return {PREFIX + name: (value, METRICS[name]) for name, value in found.items()}


def read_trainer_logps(cluster: Any, prompt_ids: Any, completion_ids: Any, temperature: float) -> np.ndarray:
    """The trainer's log-probabilities of the completion tokens, [batch, completion positions], on the host: the
    actor's model at its current weights, through the jitted forward Tunix's own log-prob calls use, under the
    actor's mesh and axis rules. An offloading cluster keeps the actor's weights in host memory between updates;
    reading them there is Tunix's job (it moves them), so that case is refused, not guessed at."""
    from flax import nnx
    from tunix.rl import common
    from tunix.rl.rl_cluster import Role
    from tunix.sft import sharding_utils

    if cluster.cluster_config.offload_to_cpu:
        raise ValueError("the sampler-trainer agreement reads the actor on the device; this cluster offloads it to the host")
    axis = cluster.cluster_config.training_config.data_sharding_axis
    with cluster._get_mesh_and_logical_axis_rules_cm(Role.ACTOR):
        graphdef, state = nnx.split(cluster.actor_trainer.model)
        logps = common.compute_per_token_logps(
            graphdef,
            state,
            prompt_tokens=sharding_utils.shard_input(prompt_ids, axis),
            completion_tokens=sharding_utils.shard_input(completion_ids, axis),
            pad_id=int(cluster.rollout.pad_id()),
            eos_id=int(cluster.rollout.eos_id()),
            stop_gradient=True,
            return_logits=False,
            temperature=temperature,
        )
    return np.asarray(logps)


def install() -> None:
    import functools
    import inspect

    from tunix.rl import rl_cluster
    from tunix.rl.grpo import grpo_learner

    generate = rl_cluster.RLCluster.generate
    compute_advantage = grpo_learner.GRPOLearner._generate_and_compute_advantage
    signature = inspect.signature(generate)
    advantage_signature = inspect.signature(compute_advantage)

    @functools.wraps(generate)  # rollout_keys' wrapper, outside this one, reads `mode` from the signature it sees
    def _generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        mode = call.arguments["mode"]
        configs = self.cluster_config.rollout_config
        config = configs[mode] if isinstance(configs, dict) else configs
        if mode != rl_cluster.Mode.TRAIN:
            _last.logprobs = None
            return generate(self, *args, **kwargs)
        # ClusterConfig is frozen, its RolloutConfig not (and may be eval's too): asked for this call only
        asked_before, config.return_logprobs = config.return_logprobs, True
        try:
            output = generate(self, *args, **kwargs)
        finally:
            config.return_logprobs = asked_before
        _last.logprobs, _last.temperature = output.logprobs, config.temperature
        return output

    @functools.wraps(compute_advantage)
    def _generate_and_compute_advantage(self: Any, *args: Any, **kwargs: Any) -> Any:
        _last.logprobs = None
        example = compute_advantage(self, *args, **kwargs)
        sampled = _last.logprobs
        if sampled is None:
            return example
        call = advantage_signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        cluster = self.rl_cluster
        if cluster.cluster_config.offload_to_cpu:
            return example  # read_trainer_logps cannot read an offloaded actor; rljob's configs never offload it
        # The weights that sampled this batch are the actor's current ones: with the engine sharing them
        # (jax_rollout.py) nothing syncs, and with a synced engine the sync came after the last update.
        trainer = read_trainer_logps(cluster, example.prompt_ids, example.completion_ids, _last.temperature)
        found = agreement([np.asarray(s) for s in sampled], trainer)
        if found is not None:
            cluster.buffer_metrics(as_tunix_metrics(found), mode=call.arguments["mode"])
        return example

    rl_cluster.RLCluster.generate = _generate
    grpo_learner.GRPOLearner._generate_and_compute_advantage = _generate_and_compute_advantage
