"""grpo.async_rollout: MaxText 0.2.5's agentic (asynchronous) rollouts, typed and refused (issue 39, part 2).

rl.yml's `rl.use_agentic_rollout` makes train_rl build Tunix's AgenticGRPOLearner instead of its GrpoLearner: a
producer thread generates rollouts up to `rl.off_policy_steps` batches ahead of the trainer, each completion its own
`rl_cluster.generate` call, at most `rl.max_concurrency` at once. Run for real on the tiny CPU job (docs/trainer.md,
"Async rollouts", says how it was run), it does not run with rljob's pins, whatever the accelerator:

1. train_rl.py:545 builds Tunix's agentic `GRPOConfig(..., force_on_policy_ratio=..., log_sampler_trainer_agreement=...)`,
   and Tunix 0.1.7's (tunix/rl/agentic/agentic_grpo_learner.py:62) has neither field: `TypeError: GRPOConfig.__init__()
   got an unexpected keyword argument 'force_on_policy_ratio'`, before any rollout. PyPI has no later Tunix; the TPU
   image installs Tunix at MaxText's own commit instead (its post_train_github_deps.txt), which this machine cannot run.
2. With those two dropped by hand, the learner runs on the jax rollout engine (it needs no vLLM server API: only
   `generate` with `return_logprobs`, which Tunix's sampler has), but on the CPU job: a prompt the chat parser makes
   longer than max_prefill_predict_length raises inside `model_call`, is logged, and the run then hangs with no step
   (0% CPU); and a completion that uses its whole budget without an end token ends its
   trajectory before its text is kept (trajectory_collect_engine.py:534-539), so the tiny model's completions were all
   empty and its three steps had loss 0 and grad_norm 0.
3. rljob's own wrappers hook the standard learner only (tunix.rl.rl_learner.RLLearner, tunix.rl.grpo.grpo_learner):
   the agentic one kept no samples and ran Tunix's k1 KL estimator whatever grpo.kl_estimator said. That holds on TPU
   too, so TPU jobs are refused as well, rather than silently losing both.

The two knobs are typed with their bounds so a spec that sets them gets this reason, not "extra field"; when a Tunix
pin and the wrappers above allow it, only the refusal goes (tests/trainer/contract/spec/test_async_rollout.py fails when (1) stops
holding).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from trainer.contract.accelerators.tpu import CPU_ACCELERATOR
from trainer.contract.spec import values as limits

# Tunix starts a thread pool of max_concurrency + 1 workers for the producer (agentic_rl_learner.py:236-240).
MAX_CONCURRENCY = 4096

ASYNC_ROLLOUT_DESCRIPTION = (
    "Tunix's asynchronous agentic learner (MaxText's rl.use_agentic_rollout): rollouts generated ahead of training, "
    "each completion its own request; null: the synchronous learner. Refused with the pinned MaxText 0.2.5 and Tunix "
    "0.1.7 (docs/trainer.md, Async rollouts)"
)


class AsyncRollout(BaseModel):
    """rl.off_policy_steps and rl.max_concurrency, read only with rl.use_agentic_rollout (rl.yml's defaults)."""

    hashed_always: ClassVar[frozenset[str]] = frozenset({"off_policy_steps", "max_concurrency"})  # spec_hash.py

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    off_policy_steps: int = Field(
        default=0,
        ge=0,
        le=limits.MAX_NUM_BATCHES,
        description="batches the rollout producer may run ahead of the policy it samples (MaxText's rl.off_policy_steps)",
    )
    max_concurrency: int = Field(
        default=256, ge=1, le=MAX_CONCURRENCY, description="rollout requests in flight at once (MaxText's rl.max_concurrency)"
    )


def async_rollout_refusal(accelerator: str) -> str:
    """Why a job with grpo.async_rollout set is refused on this accelerator (the module's docstring has the evidence)."""
    first = (
        "grpo.async_rollout (MaxText's rl.use_agentic_rollout) cannot run: MaxText 0.2.5's train_rl passes "
        "force_on_policy_ratio and log_sampler_trainer_agreement to Tunix 0.1.7's agentic GRPOConfig, which has "
        "neither (a TypeError before any rollout)"
    )
    if accelerator == CPU_ACCELERATOR:
        return (
            f"{first}; past that, with the jax rollout engine on cpu a prompt longer than max_prefill_predict_length "
            "hangs the run and a completion that uses its whole token budget is kept empty. Leave it null "
            "(docs/trainer.md, Async rollouts)"
        )
    return (
        f"{first}; and on {accelerator} rljob's per-step samples and grpo.kl_estimator reach only the synchronous "
        "learner. Leave it null (docs/trainer.md, Async rollouts)"
    )
