"""A warning when the rollout engine and the trainer disagree on the sampled tokens' log-probabilities.

GRPO's importance ratio and KL treat the trainer's log-probabilities as those of the policy that sampled; each step's
`sampler_trainer/train/logp_diff_mean` (trainer/maxtext_entry/logprob_agreement.py) is how far they were apart, in
nats per sampled token. Tunix's TPU bring-up measured 0.011 with matching micro-batch shapes and 0.070 with
mismatched ones (bf16 on the matrix units); the default threshold, 0.05, sits between the two. The warning needs
several steps in a row past it, so one odd batch does not raise it.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.domain.records.train_step_summary import TrainStepSummary


def agreement_drift(steps: Sequence[TrainStepSummary], *, limit: float, last: int) -> str | None:
    """The warning when each of the last `last` steps that measured the agreement was above `limit`; else None."""
    measured = [s for s in steps if s.logp_diff_mean is not None][-last:]
    if len(measured) < last or any(s.logp_diff_mean is None or s.logp_diff_mean <= limit for s in measured):
        return None
    worst = max(s.logp_diff_mean or 0.0 for s in measured)
    return (
        f"the rollout engine and the trainer disagree on the sampled tokens' log-probabilities: mean |difference| above "
        f"{limit:g} nats per token at each of steps {measured[0].step}-{measured[-1].step} (up to {worst:.3g}), so "
        "GRPO's ratio and KL are computed against a policy other than the one that sampled and the gradient is "
        "biased. Project the logits in float32 (model.logits_dtype: float32; on the chip it closed nearly all of a bf16 "
        "gap at no measured cost), compute in float32 (model.compute_dtype), or compare the engine's and the trainer's "
        "batch shapes"
    )
