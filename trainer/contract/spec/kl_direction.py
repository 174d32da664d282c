"""grpo.kl_direction: which KL divergence the k3 penalty's gradient is the gradient of (issue 53, section 3).

With samples x ~ pi (on-policy), r = pi_ref(x) / pi(x) and k3 = r - log r - 1 (Tunix's `low_var_kl`):
- Tunix's loss takes k3 as it is; the samples' distribution carries no gradient, so the penalty's gradient is
  E_pi[grad k3] = sum_x pi(x) (1 - r(x)) grad log pi(x) = -sum_x pi_ref(x) grad log pi(x) = grad KL(pi_ref || pi).
- TRL 1.16 (`use_bias_correction_kl=True`, its default) weights k3 by the importance ratio rho = pi / pi_old (value 1
  on-policy, gradient grad log pi): E_pi[grad (rho k3)] = E_pi[k3 grad log pi + grad k3] = grad E_pi[k3]
  = grad KL(pi || pi_ref).
trainer/maxtext_entry/grpo_objective.py installs the second as a Tunix kl_loss_mode of its own.
"""

from __future__ import annotations

from typing import Literal

KlDirection = Literal["reference_to_policy", "policy_to_reference"]
REFERENCE_TO_POLICY: KlDirection = "reference_to_policy"
POLICY_TO_REFERENCE: KlDirection = "policy_to_reference"
# The Tunix kl_loss_mode grpo_objective.py adds: k3 times exp(logp - stop_gradient(logp)).
POLICY_TO_REFERENCE_K3_MODE = "rljob_k3_policy_to_reference"

KL_DIRECTION_DESCRIPTION = (
    "which KL the k3 penalty's gradient follows: reference_to_policy, that of KL(p_ref || p) (Tunix's k3 as the loss); "
    "policy_to_reference, that of KL(p || p_ref) (k3 times the importance ratio p/p_old, TRL's use_bias_correction_kl); "
    "null: the estimator as Tunix takes it (for k3, reference_to_policy). Only with kl_estimator k3 and beta > 0; "
    "policy_to_reference only with num_iterations 1"
)


def tunix_kl_loss_mode(estimator_mode: str, direction: KlDirection | None) -> str:
    """The kl_loss_mode Tunix is given: the estimator's own (`estimator_mode`), or rljob's ratio-weighted k3."""
    return POLICY_TO_REFERENCE_K3_MODE if direction == POLICY_TO_REFERENCE else estimator_mode


def kl_direction_problem(direction: KlDirection | None, kl_estimator: str, beta: float, num_iterations: int) -> str | None:
    """Why grpo.kl_direction cannot be set so, or None."""
    if direction is None:
        return None
    if kl_estimator != "k3":
        return f"kl_direction applies to kl_estimator k3 (this spec's is {kl_estimator}): leave it null"
    if beta == 0:
        return "kl_direction has no effect with beta 0 (no KL penalty): leave it null"
    if direction == POLICY_TO_REFERENCE and num_iterations != 1:
        # Tunix's compute_kl_divergence sees the current log-probabilities only, not the rollout policy's
        # (old_per_token_logps): the ratio it can form is the on-policy one.
        return f"kl_direction policy_to_reference needs num_iterations 1 (this spec's is {num_iterations}): its ratio is the on-policy one"
    return None
