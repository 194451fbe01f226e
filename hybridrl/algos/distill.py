"""On-policy distillation (`distillation.*`): the student samples, a frozen teacher scores the samples, and the
student is pushed toward the teacher on its own tokens.

On-policy distillation minimises the reverse KL(π_student || π_teacher) on the states the student visits
(Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes",
GKD; Thinking Machines, "On-Policy Distillation", 2025). Per sampled token a_t ~ π_s, with
x_t = log π_s(a_t|s_t) - log π_t(a_t|s_t), the KL is estimated by one of the estimators of algos/kl.py
(Schulman 2020), with the teacher in the reference's place:

- k1 = x (unbiased value; its gradient ∇ log π_s does not depend on the teacher, so it is refused as a loss);
- k3 = e^{-x} + x - 1 (unbiased, >= 0). Its gradient (1 - π_t/π_s) ∇ log π_s has expectation
  -Σ_a π_t ∇ log π_s = ∇ KL(π_t || π_s): as a loss on student samples k3 descends the *forward* KL;
- k2 = x² / 2, and the straight-through `k1+` / `k3+` (value of k1 / k3, gradient of k2): gradient
  x ∇ log π_s, whose expectation is ∇ KL(π_s || π_t), the reverse KL. This is Thinking Machines' per-token
  advantage -x in a REINFORCE update, on-policy.

Two ways into the update (verl's `use_policy_gradient`):
- false (GKD): the estimate is backpropagated as a loss, `distillation_loss`;
- true (Thinking Machines): the estimate, detached, is a per-token advantage -k_t of the actor's own policy loss
  (ratio against π_old, clipped), `distillation_pg_loss`. Its gradient at ratio 1 is k_t ∇ log π_s: with k1 (x),
  E_s[x ∇ log π_s] = ∇ KL(π_s || π_t), the same as `k1+` as a loss; with k3 as the reward it is
  ∇ KL(π_s || π_t) - ∇ KL(π_t || π_s), which vanishes to second order near the teacher.

Everything here is a pure function of [N, T] tensors; the actor adds the chosen term to its loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hybridrl.algos.kl import KL_ESTIMATORS, kl_penalty
from hybridrl.algos.policy_losses import POLICY_LOSSES, PolicyLossParams
from hybridrl.algos.reduce import LossScale, masked_mean, reduce_loss

# estimators whose gradient as a loss ignores the teacher (d k1 / d log π_s = 1): nothing would be distilled
NO_TEACHER_GRADIENT = ("k1", "kl")
# estimators whose value as a per-token reward gives the reverse-KL gradient (E_s[x ∇ log π_s]); the '+' variants
# differ from k1 only in their gradient, which a detached reward does not use
UNBIASED_AS_REWARD = ("k1", "kl", "k1+", "kl+")


def distillation_token_kl(log_probs: Tensor, teacher_log_probs: Tensor, estimator: str) -> Tensor:
    """[N, T] per-token estimate of KL(π_s || π_t) at the sampled tokens: log_probs (student, with gradient)
    and teacher_log_probs (frozen) are [N, T] log-probs of the same tokens."""
    return kl_penalty(log_probs, teacher_log_probs.detach(), estimator)


def distillation_loss(log_probs: Tensor, teacher_log_probs: Tensor, mask: Tensor, estimator: str, agg_mode: str,
                      scale: LossScale | None = None) -> Tensor:
    """The scalar distillation loss: the per-token estimate reduced with the actor's loss_agg_mode (`scale`: the
    whole mini-batch's counts, algos/reduce.py); mask [N, T] is 0 on padding and tool tokens."""
    return reduce_loss(distillation_token_kl(log_probs, teacher_log_probs, estimator), mask, agg_mode, scale)


def distillation_advantages(log_probs: Tensor, teacher_log_probs: Tensor, estimator: str) -> Tensor:
    """[N, T] per-token advantage -k_t of use_policy_gradient=true: the estimate of KL(π_s || π_t) at each sampled
    token, detached (Thinking Machines, "On-Policy Distillation", 2025: reward = log π_t - log π_s)."""
    return -distillation_token_kl(log_probs.detach(), teacher_log_probs, estimator)


def distillation_pg_loss(log_probs: Tensor, old_log_probs: Tensor, teacher_log_probs: Tensor, mask: Tensor,
                         estimator: str, policy_loss: str, params: PolicyLossParams, agg_mode: str,
                         scale: LossScale | None = None) -> Tensor:
    """The scalar policy-gradient distillation loss: the actor's policy loss (`policy_loss`, a POLICY_LOSSES name,
    with its clip `params`) of the advantages -k_t, reduced with the actor's loss_agg_mode."""
    advantages = distillation_advantages(log_probs, teacher_log_probs, estimator)
    token = POLICY_LOSSES.get(policy_loss)(log_probs, old_log_probs, advantages, mask, params).loss
    return reduce_loss(token, mask, agg_mode, scale)


def teacher_metrics(log_probs: Tensor, teacher_log_probs: Tensor, mask: Tensor, estimator: str) -> dict[str, float]:
    """distill/* metrics of a batch, over its response tokens (mask [N, T]): the per-token KL estimate
    (mean and max) and the teacher's mean log-prob of the student's tokens."""
    kl = KL_ESTIMATORS.get(estimator)(log_probs, teacher_log_probs)
    on = mask.bool()
    return {"distill/teacher_kl_mean": float(masked_mean(kl, mask)),
            "distill/teacher_kl_max": float(kl[on].max()) if on.any() else 0.0,
            "distill/teacher_logprob_mean": float(masked_mean(teacher_log_probs, mask))}


def without_task_advantages(advantages: Tensor) -> Tensor:
    """distillation.distillation_loss.use_task_rewards=false: the reward's advantages leave the actor loss
    (every registered policy loss is exactly 0 at advantage 0), so the distillation loss alone trains."""
    return torch.zeros_like(advantages)
