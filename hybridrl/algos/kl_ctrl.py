"""KL in the reward (`algorithm.use_kl_in_reward`): r_t <- r_t - beta * KL_t, with beta from a
fixed or adaptive controller (`algorithm.kl_ctrl.type`).

The adaptive rule is Ziegler et al. 2019 ("Fine-Tuning Language Models from Human
Preferences", eq. 2): e = clip(KL / target - 1, -0.2, 0.2); beta <- beta * (1 + e * n / horizon),
with KL the batch's mean per-token KL and n the number of responses in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from hybridrl.algos.kl import kl_penalty
from hybridrl.algos.kl_ctrl_types import KL_CTRL_TYPES
from hybridrl.errors import ConfigError



@dataclass
class KLController:
    """The in-reward KL coefficient; `value` is its whole state (saved with checkpoints)."""

    value: float
    type: str = "fixed"
    target_kl: float = 0.1
    horizon: int = 10000

    def __post_init__(self) -> None:
        if self.type not in KL_CTRL_TYPES:
            raise ConfigError(f"algorithm.kl_ctrl.type={self.type!r} is not supported; valid values: "
                              f"{', '.join(KL_CTRL_TYPES)}")

    def update(self, current_kl: float, n_steps: int) -> None:
        if self.type == "fixed":
            return
        error = min(max(current_kl / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def apply_kl_penalty(token_level_scores: Tensor, log_probs: Tensor, ref_log_probs: Tensor, response_mask: Tensor,
                     kind: str, beta: float) -> tuple[Tensor, float]:
    """(token rewards r_t - beta * KL_t, the batch's mean per-token KL); tensors [B, T], 0 on padding.

    The KL is measured against the policy that sampled the batch (π_old), as in RLHF.
    """
    kl = kl_penalty(log_probs, ref_log_probs, kind) * response_mask
    # mean over each response's tokens, then over responses (verl's "current_kl")
    per_seq = kl.sum(-1) / response_mask.sum(-1).clamp(min=1)
    return token_level_scores - beta * kl, float(per_seq.mean())
