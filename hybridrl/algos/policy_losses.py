"""Policy losses (`actor_rollout_ref.actor.policy_loss.loss_mode`), per token, unreduced.

A loss returns a per-token `[B, T]` tensor; `algos.reduce.reduce_loss` turns it into a
scalar, so the formula never decides the normalization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from hybridrl.registry import Registry

# exp() of a log-ratio above ~88 overflows float32; 20 (ratio ~5e8) is far past any clip range
# and keeps a single stale or corrupted sample from producing inf/NaN gradients.
LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class PolicyLossParams:
    clip_ratio_low: float = 0.2  # ratio clipped below at 1 - clip_ratio_low
    clip_ratio_high: float = 0.2  # ratio clipped above at 1 + clip_ratio_high (DAPO: larger)
    clip_ratio_c: float = 3.0  # dual clip: for A < 0 the loss is at most -A * c (Ye et al. 2020)
    tau_pos: float = 1.0  # SAPO gate temperature where A > 0
    tau_neg: float = 1.05  # SAPO gate temperature where A <= 0


@dataclass
class PolicyLossOutput:
    loss: Tensor  # [B, T] per-token loss (to be reduced with reduce_loss)
    clipped: Tensor  # [B, T] 1.0 where the clipped surrogate was the one taken
    ppo_kl: Tensor  # [B, T] log π_old - log π, the per-token approximate KL of the update
    clipped_lower: Tensor | None = None  # [B, T] 1.0 where the dual clip bound -A c was taken (A < 0); None: no dual clip


# (log_probs, old_log_probs, advantages, response_mask, params); all tensors [B, T]
PolicyLoss = Callable[[Tensor, Tensor, Tensor, Tensor, PolicyLossParams], PolicyLossOutput]
# meta `zero_at_zero_advantage`: the loss is -A times a factor independent of A, so a token with A = 0 has
# loss 0 and gradient 0 (algos/zero_advantage.py leaves such responses out of the update)
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss", "actor_rollout_ref.actor.policy_loss.loss_mode")


def _log_ratio(log_probs: Tensor, old_log_probs: Tensor) -> Tensor:
    """log π - log π_old, clamped so exp() stays finite."""
    return (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _clipped_surrogate(log_ratio: Tensor, advantages: Tensor, params: PolicyLossParams) -> tuple[Tensor, Tensor]:
    """max(-A r, -A clip(r, 1-lo, 1+hi)) and where the clipped term won; r = exp(log_ratio)."""
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - params.clip_ratio_low, 1.0 + params.clip_ratio_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float()


@POLICY_LOSSES.register("vanilla", "PPO clipped surrogate with asymmetric clip range and dual clip (Schulman et al. 2017)",
                        zero_at_zero_advantage=True)
def vanilla(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor,
            params: PolicyLossParams) -> PolicyLossOutput:
    """loss = max(-A r, -A clip(r, 1-lo, 1+hi)), then min(., -A c) where A < 0."""
    log_ratio = _log_ratio(log_probs, old_log_probs)
    loss, clipped = _clipped_surrogate(log_ratio, advantages, params)
    bound = -advantages * params.clip_ratio_c
    lower = (advantages < 0) & (bound < loss)  # verl's pg_clipfrac_lower: the dual clip is the one taken
    loss = torch.where(lower, bound, loss)
    return PolicyLossOutput(loss=loss, clipped=clipped, ppo_kl=-log_ratio, clipped_lower=lower.float())


@POLICY_LOSSES.register(
    "gspo", "sequence-level ratio s = exp(mean_t log r_t), clipped per sequence (Zheng et al. 2025, GSPO); "
            "use small clip ranges (paper: 3e-4 / 4e-4) and loss_agg_mode=seq-mean-token-mean",
    zero_at_zero_advantage=True)
def gspo(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor,
         params: PolicyLossParams) -> PolicyLossOutput:
    token_log_ratio = _log_ratio(log_probs, old_log_probs)
    seq_log_ratio = (token_log_ratio * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)  # [B]
    # Every token carries the value log s_i but its own gradient ∇log π_t (GSPO-token, eq. 13):
    # log s_{i,t} = sg[log s_i] + log π_t - sg[log π_t].
    log_ratio = (seq_log_ratio.detach()[:, None] + log_probs - log_probs.detach()).clamp(max=LOG_RATIO_CLAMP)
    loss, clipped = _clipped_surrogate(log_ratio, advantages, params)
    return PolicyLossOutput(loss=loss, clipped=clipped, ppo_kl=-token_log_ratio)


@POLICY_LOSSES.register(
    "cispo", "REINFORCE weighted by the clipped, detached ratio: -sg(clip(r, 1-lo, 1+hi)) A log π "
             "(MiniMax-M1, 2025): clipped tokens keep their gradient", zero_at_zero_advantage=True)
def cispo(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor,
          params: PolicyLossParams) -> PolicyLossOutput:
    log_ratio = _log_ratio(log_probs, old_log_probs)
    ratio = torch.exp(log_ratio).detach()
    weight = ratio.clamp(1.0 - params.clip_ratio_low, 1.0 + params.clip_ratio_high)
    return PolicyLossOutput(loss=-advantages * weight * log_probs, clipped=(weight != ratio).float(), ppo_kl=-log_ratio)


@POLICY_LOSSES.register("gpg", "plain policy gradient -A log π, no ratio and no clip (Chu et al. 2025, GPG)",
                        zero_at_zero_advantage=True)
def gpg(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor,
        params: PolicyLossParams) -> PolicyLossOutput:
    log_ratio = _log_ratio(log_probs, old_log_probs)
    return PolicyLossOutput(loss=-advantages * log_probs, clipped=torch.zeros_like(log_probs), ppo_kl=-log_ratio)


@POLICY_LOSSES.register(
    "sapo", "soft gate instead of a hard clip: -A * sigmoid(tau (r - 1)) * 4 / tau, tau = tau_pos if A > 0 else "
            "tau_neg (SAPO, Qwen 2025); equals the policy gradient at r = 1; use loss_agg_mode=seq-mean-token-mean",
    zero_at_zero_advantage=True)
def sapo(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor,
         params: PolicyLossParams) -> PolicyLossOutput:
    log_ratio = _log_ratio(log_probs, old_log_probs)
    tau = torch.where(advantages > 0, torch.full_like(advantages, params.tau_pos), torch.full_like(advantages, params.tau_neg))
    gate = torch.sigmoid(tau * (torch.exp(log_ratio) - 1.0)) * 4.0 / tau
    return PolicyLossOutput(loss=-advantages * gate, clipped=torch.zeros_like(log_probs), ppo_kl=-log_ratio)
