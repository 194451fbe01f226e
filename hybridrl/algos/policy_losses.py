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


@dataclass
class PolicyLossOutput:
    loss: Tensor  # [B, T] per-token loss (to be reduced with reduce_loss)
    clipped: Tensor  # [B, T] 1.0 where the clipped surrogate was the one taken
    ppo_kl: Tensor  # [B, T] log π_old - log π, the per-token approximate KL of the update


PolicyLoss = Callable[[Tensor, Tensor, Tensor, PolicyLossParams], PolicyLossOutput]
POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss", "actor_rollout_ref.actor.policy_loss.loss_mode")


@POLICY_LOSSES.register("vanilla", "PPO clipped surrogate with asymmetric clip range and dual clip (Schulman et al. 2017)")
def vanilla(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, params: PolicyLossParams) -> PolicyLossOutput:
    """All inputs [B, T]. loss = max(-A r, -A clip(r, 1-lo, 1+hi)), then min(., -A c) where A < 0."""
    log_ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - params.clip_ratio_low, 1.0 + params.clip_ratio_high)
    loss = torch.maximum(unclipped, clipped)
    dual = torch.minimum(loss, -advantages * params.clip_ratio_c)
    loss = torch.where(advantages < 0, dual, loss)
    return PolicyLossOutput(loss=loss, clipped=(clipped > unclipped).float(), ppo_kl=-log_ratio)
