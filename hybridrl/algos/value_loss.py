"""PPO's clipped value loss for the critic, per token and unreduced (reduce with reduce_loss)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class ValueLossOutput:
    loss: Tensor  # [B, T] 0.5 * max((V - R)^2, (V_clip - R)^2)
    clipped: Tensor  # [B, T] 1.0 where the clipped term was the larger (it set the gradient)


def clipped_value_loss(vpreds: Tensor, old_values: Tensor, returns: Tensor, cliprange_value: float) -> ValueLossOutput:
    """PPO value clipping (Schulman et al. 2017; as in OpenAI baselines' ppo2): the new value may
    move at most `cliprange_value` from the value seen at rollout time before the squared error
    stops rewarding it. All tensors [B, T]."""
    v_clip = old_values + (vpreds - old_values).clamp(-cliprange_value, cliprange_value)
    unclipped = (vpreds - returns).square()
    clipped = (v_clip - returns).square()
    # Inside the range v_clip = old + (V - old) equals V only up to rounding, so `clipped > unclipped`
    # alone would count in-range tokens by coin flip: a token is clipped only outside the range.
    outside = (vpreds - old_values).abs() > cliprange_value
    return ValueLossOutput(loss=0.5 * torch.maximum(unclipped, clipped),
                           clipped=(outside & (clipped > unclipped)).float())


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var(R - V) / Var(R) over valid tokens: 1 is a perfect critic, 0 no better than a constant."""
    m = mask.bool()
    ret = returns[m].double()
    if ret.numel() < 2:
        return 0.0
    var = ret.var()
    # Constant returns up to rounding (spread below 1e-6 in reward units, or 1e-6 of their size):
    # nothing to explain, and a ratio over rounding noise would read -1e15.
    if var <= 1e-12 * max(1.0, float((ret ** 2).mean())):
        return 0.0
    return float(1.0 - (ret - values[m].double()).var() / var)
