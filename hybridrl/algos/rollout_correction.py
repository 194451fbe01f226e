"""Rollout importance sampling: correct the policy loss for the gap between the engine that sampled
(π_rollout, e.g. vLLM in bf16) and the trainer's π_old, with truncated importance weights
(Ionides 2008, "Truncated importance sampling"; applied to RL post-training as TIS by Yao et al.
2025, "Your efficient RL framework secretly brings you off-policy RL training").

    token:    w_t = min(π_old(a_t) / π_rollout(a_t), C)
    sequence: w_t = min(Π_s π_old(a_s) / π_rollout(a_s), C)   (the same weight on every token)

The weights multiply the per-token policy loss as constants (no gradient flows through them).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from hybridrl.registry import Registry

# (old_log_probs, rollout_log_probs, mask) [N, T] -> log importance ratio per token [N, T]
LogRatio = Callable[[Tensor, Tensor, Tensor], Tensor]
ROLLOUT_IS: Registry[LogRatio] = Registry("rollout importance weight", "algorithm.rollout_correction.rollout_is")


@ROLLOUT_IS.register("token", "w_t = min(pi_old(a_t) / pi_rollout(a_t), C) per token")
def _token(old: Tensor, rollout: Tensor, mask: Tensor) -> Tensor:
    return (old - rollout) * mask


@ROLLOUT_IS.register("sequence", "w = min(prod_t pi_old(a_t) / pi_rollout(a_t), C), one weight per response")
def _sequence(old: Tensor, rollout: Tensor, mask: Tensor) -> Tensor:
    return ((old - rollout) * mask).sum(-1, keepdim=True).expand_as(mask)


def rollout_is_weights(old: Tensor, rollout: Tensor, mask: Tensor, level: str, threshold: float) -> tuple[Tensor, Tensor]:
    """(weights, truncated) [N, T]: the truncated importance weights (0 on padding) and where the
    cap C = threshold applied (1.0/0.0). The log ratio is clamped at log C before exp, so a huge
    ratio cannot overflow."""
    log_ratio = ROLLOUT_IS.get(level)(old.detach(), rollout, mask)
    cap = torch.log(torch.tensor(threshold, dtype=log_ratio.dtype))
    truncated = (log_ratio > cap).to(log_ratio.dtype) * mask
    return torch.exp(log_ratio.clamp(max=cap)) * mask, truncated
