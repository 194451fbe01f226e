"""The Bradley–Terry pairwise loss of reward-model training (pure tensors, no I/O).

A reward model r(x, y) is fitted so that P(chosen ≻ rejected) = sigmoid(r_chosen - r_rejected)
(Bradley & Terry, 1952, "Rank analysis of incomplete block designs"; the reward-model loss of
InstructGPT, Ouyang et al. 2022, eq. 1). Llama 2 (Touvron et al. 2023, eq. 2) subtracts a
per-pair margin m inside the sigmoid, so that pairs labelled "much better" must be separated by
at least m: loss = -log sigmoid(r_c - r_r - m). Eisenstein et al. 2023 ("Helping or Herding?")
add an auxiliary (r_c + r_r)^2 term that keeps rewards centred on zero without changing which
answer wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class PairStats:
    """Sums over a batch of pairs (not means), so micro-batches add up to the whole batch's values."""

    loss_sum: Tensor  # [] sum of per-pair losses (differentiable)
    correct: float  # pairs with r_chosen > r_rejected (a tie is not correct)
    margin_sum: float  # sum of r_chosen - r_rejected
    count: int  # pairs


def bradley_terry_loss(r_chosen: Tensor, r_rejected: Tensor, margin: Tensor | None = None,
                       center_coeff: float = 0.0) -> Tensor:
    """[N] per-pair loss -log sigmoid(r_c - r_r - m) + center_coeff * (r_c + r_r)^2.

    r_chosen, r_rejected, margin: [N]. logsigmoid is used instead of log(sigmoid(.)): it stays
    finite (≈ the difference itself) when the difference is very negative, where sigmoid
    underflows to 0 and the log would be -inf."""
    diff = r_chosen - r_rejected  # [N]
    if margin is not None:
        diff = diff - margin
    loss = -torch.nn.functional.logsigmoid(diff)  # [N]
    if center_coeff:
        loss = loss + center_coeff * (r_chosen + r_rejected) ** 2
    return loss


def pair_stats(r_chosen: Tensor, r_rejected: Tensor, margin: Tensor | None = None,
               center_coeff: float = 0.0) -> PairStats:
    """The loss sum and the accuracy/margin counts of one (micro-)batch of pairs; r_*: [N]."""
    diff = (r_chosen - r_rejected).detach()  # [N] the reward margin, without the label margin
    return PairStats(bradley_terry_loss(r_chosen, r_rejected, margin, center_coeff).sum(),
                     float((diff > 0).sum()), float(diff.sum()), int(diff.numel()))
