"""Rollout importance sampling: correct the policy loss for the gap between the engine that sampled
(π_rollout, e.g. vLLM in bf16) and the trainer's π_old, with truncated importance weights
(Ionides 2008, "Truncated importance sampling"; applied to RL post-training as TIS by Yao et al.
2025, "Your efficient RL framework secretly brings you off-policy RL training").

    token:    w_t = min(π_old(a_t) / π_rollout(a_t), C)
    sequence: w_t = min(Π_s π_old(a_s) / π_rollout(a_s), C)   (the same weight on every token)

The weights multiply the per-token policy loss as constants (no gradient flows through them).

Rollout rejection sampling (verl's `rollout_rs`; Liu, Li et al. 2025, "When Speed Kills Stability:
Demystifying RL Collapse from the Training-Inference Mismatch"): instead of weighting, leave out of the
loss the tokens, or whole responses, whose ratio ρ = π_old / π_rollout falls outside [lower, upper]:

    token:     reject token t      where ρ_t = π_old(a_t) / π_rollout(a_t) is out of the band
    sequence:  reject the response where Π_t ρ_t is out of the band
    geometric: reject the response where (Π_t ρ_t)^(1/|y|), the per-token geometric mean, is out of the band
               (length-independent, so its band is narrow: e.g. upper 1.001)

A rejected token's response mask becomes 0, so it also leaves the loss normaliser (a token-mean over
fewer tokens), exactly as if it had been padding.
"""

from __future__ import annotations

from dataclasses import dataclass
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


# (log_ratio [N, T], mask [N, T]) -> the log of the ratio compared with the band, per token [N, T]
BandRatio = Callable[[Tensor, Tensor], Tensor]
ROLLOUT_RS: Registry[BandRatio] = Registry("rollout rejection level", "algorithm.rollout_correction.rollout_rs")


@ROLLOUT_RS.register("token", "reject each token whose pi_old / pi_rollout is outside the band")
def _rs_token(log_ratio: Tensor, mask: Tensor) -> Tensor:
    return log_ratio


@ROLLOUT_RS.register("sequence", "reject a whole response whose product of token ratios is outside the band")
def _rs_sequence(log_ratio: Tensor, mask: Tensor) -> Tensor:
    return log_ratio.sum(-1, keepdim=True).expand_as(mask)


@ROLLOUT_RS.register("geometric", "reject a whole response whose geometric-mean token ratio is outside the band")
def _rs_geometric(log_ratio: Tensor, mask: Tensor) -> Tensor:
    return (log_ratio.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)).expand_as(mask)


@dataclass(frozen=True)
class RejectionBand:
    """algorithm.rollout_correction.rollout_rs at `level`, keeping ratios in [lower, upper]."""

    level: str
    upper: float
    lower: float


def rollout_rs_keep(old: Tensor, rollout: Tensor, mask: Tensor, band: RejectionBand) -> Tensor:
    """[N, T] 1.0 on the response tokens kept, 0.0 on the rejected ones and on padding: the new response
    mask. The band is compared in log space (log lower <= log ρ <= log upper), so no ratio overflows."""
    log_ratio = (old.detach() - rollout) * mask
    value = ROLLOUT_RS.get(band.level)(log_ratio, mask)
    inside = (value <= torch.log(torch.tensor(band.upper, dtype=value.dtype))) & (
        value >= torch.log(torch.tensor(band.lower, dtype=value.dtype)))
    return inside.to(mask.dtype) * mask


def rejection_metrics(mask: Tensor, keep: Tensor) -> dict[str, float]:
    """Shares of the response tokens, and of the responses (all of their tokens), that were rejected."""
    tokens = mask.sum().clamp(min=1)
    rows = mask.sum(-1) > 0
    gone = rows & (keep.sum(-1) == 0)
    return {"rollout_corr/rs_rejected_token_frac": float((mask - keep).sum() / tokens),
            "rollout_corr/rs_rejected_seq_frac": float(gone.sum() / rows.sum().clamp(min=1))}
