"""KL estimators between the policy and the reference, per token (Schulman, "Approximating KL
Divergence", 2020): with x = log π - log π_ref,
k1 = x, abs = |x|, k2 = x^2 / 2, k3 = exp(-x) + x - 1 (unbiased, low variance, >= 0 up to float
rounding: about -6e-8 in float32 for |x| < 1e-3).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from hybridrl.registry import Registry

KLEstimator = Callable[[Tensor, Tensor], Tensor]
KL_ESTIMATORS: Registry[KLEstimator] = Registry("KL estimator", "actor_rollout_ref.actor.kl_loss_type")

# k3 explodes when the policy puts much less mass than the reference on a sampled token;
# verl clamps it to [-10, 10] and we do the same so one token cannot dominate the loss.
K3_CLAMP = 10.0


def _k1(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    return log_probs - ref_log_probs


def _abs(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    return (log_probs - ref_log_probs).abs()


def _k2(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    return 0.5 * (log_probs - ref_log_probs).square()


def _k3(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    x = ref_log_probs - log_probs  # log(π_ref / π)
    return (torch.exp(x) - x - 1).clamp(-K3_CLAMP, K3_CLAMP)


for _names, _fn, _doc in [
    (("kl", "k1"), _k1, "k1 = log π - log π_ref (unbiased, high variance, can be negative)"),
    (("abs",), _abs, "|log π - log π_ref|"),
    (("mse", "k2"), _k2, "k2 = (log π - log π_ref)^2 / 2"),
    (("low_var_kl", "k3"), _k3, "k3 = π_ref/π - log(π_ref/π) - 1, clamped to [-10, 10] (low variance, >= 0)"),
]:
    for _name in _names:
        KL_ESTIMATORS.register(_name, _doc)(_fn)


def _straight_through(estimator: KLEstimator) -> KLEstimator:
    """The estimator's value with k2's gradient (log π - log π_ref), an unbiased gradient of KL."""
    def fn(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
        k2 = _k2(log_probs, ref_log_probs)
        return estimator(log_probs, ref_log_probs).detach() + (k2 - k2.detach())
    return fn


for _entry in list(KL_ESTIMATORS.entries()):
    KL_ESTIMATORS.register(f"{_entry.name}+", f"value of {_entry.name}, gradient of k2 (straight-through)")(
        _straight_through(_entry.fn))


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, kind: str) -> Tensor:
    """Per-token KL estimate [B, T] of the kind named by `kl_loss_type`."""
    return KL_ESTIMATORS.get(kind)(log_probs, ref_log_probs)
