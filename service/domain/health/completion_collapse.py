"""Two ways a GRPO run goes wrong that its reward curve hides, read from the recent train steps.

- A collapse: the policy stops writing. Completions turn empty (EOS first) or shrink to a fraction of their
  length; every completion of a prompt then gets the same reward, so it also reads as "no signal", but the cure
  differs (an earlier checkpoint and a gentler update, not more varied sampling). With Tunix's own masks an empty
  completion left the loss and the KL entirely, so nothing pulled the policy back (trainer/maxtext_entry/
  stop_token.py); the learning bench's lr 2e-5 arm collapsed to empty completions from step 21.
- KL rising on steps without reward signal: with zero advantages only the KL penalty and weight decay move the
  policy, so a KL that grows there means the penalty pushes away from the reference rather than back (k1 on-policy,
  trainer/maxtext_entry/grpo_objective.py) or something else moves the weights.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.domain.records.train_step_summary import TrainStepSummary

KL_RISE_MIN_STEPS = 3  # a trailing run of steps without signal at least this long
KL_RISE_MIN = 0.005  # and a rise over it at least this large (Tunix's KL is per token, in nats)


def collapse(steps: Sequence[TrainStepSummary], *, last: int, empty_share: float, length_share: float) -> str | None:
    """Why the `last` steps show a collapse (at each, at least `empty_share` of completions empty, or the mean length
    at most `length_share` of the first reported one, the run's first when the caller keeps it), or None."""
    recent = list(steps[-last:])
    if len(recent) < last:
        return None
    empties = [s.empty_fraction for s in recent]
    if all(e is not None and e >= empty_share for e in empties):
        shares = ", ".join(f"{e:.0%}" for e in empties if e is not None)
        return (
            f"at each of the last {len(recent)} steps (to step {recent[-1].step}) at least "
            f"{empty_share:.0%} of completions were empty ({shares})"
        )
    first = next(((s.step, s.mean_length) for s in steps if s.mean_length is not None and s.mean_length > 0), None)
    lengths = [s.mean_length for s in recent]
    if first is None or first[0] >= recent[0].step:
        return None
    first_step, first_length = first
    if all(v is not None and v <= first_length * length_share for v in lengths):
        return (
            f"the mean completion length fell from {first_length:.1f} tokens at step {first_step} to "
            f"{lengths[-1]:.1f} at step {recent[-1].step}, at most {length_share:.0%} of it at "
            f"each of the last {len(recent)} steps"
        )
    return None


def kl_rise_without_signal(steps: Sequence[TrainStepSummary]) -> str | None:
    """A warning when the KL grew over the trailing steps that had no reward signal; None otherwise."""
    run: list[TrainStepSummary] = []
    for s in reversed(steps):
        if s.signal_fraction != 0 or s.kl is None:
            break
        run.insert(0, s)
    if len(run) < KL_RISE_MIN_STEPS:
        return None
    first, last = run[0], run[-1]
    assert first.kl is not None and last.kl is not None
    if last.kl - first.kl < KL_RISE_MIN or last.kl <= max(s.kl for s in run[:-1] if s.kl is not None):
        return None
    return (
        f"the KL to the reference rose from {first.kl:.3g} to {last.kl:.3g} over steps {first.step}-{last.step}, "
        "none of which had reward signal: with zero advantages only the KL penalty and weight decay move the "
        "policy, and the penalty should pull it back. Check grpo.kl_estimator (k1 does not pull back on-policy) "
        "and grpo.beta"
    )
