"""Advantage estimators (`algorithm.adv_estimator`), pure functions in one registry.

Every estimator has the signature `(AdvantageInputs, AdvantageParams) -> AdvantageOutput`,
so the trainer calls `ADV_ESTIMATORS.get(name)(inputs, params)` whatever the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from hybridrl.registry import Registry


@dataclass
class AdvantageInputs:
    token_level_rewards: Tensor  # [B, T] reward per response token (outcome scores sit on the last token)
    response_mask: Tensor  # [B, T] 1 on generated tokens, 0 on padding
    uid: Tensor  # [B] long; the n responses sampled for one prompt share a uid


@dataclass(frozen=True)
class AdvantageParams:
    norm_adv_by_std_in_grpo: bool = True  # False: Dr.GRPO (Liu et al. 2025) drops the std division
    epsilon: float = 1e-6  # keeps the division finite for zero-variance groups


@dataclass
class AdvantageOutput:
    advantages: Tensor  # [B, T], 0 on padding
    returns: Tensor  # [B, T] value targets; outcome estimators use the advantages (as verl does)


Estimator = Callable[[AdvantageInputs, AdvantageParams], AdvantageOutput]
ADV_ESTIMATORS: Registry[Estimator] = Registry("advantage estimator", "algorithm.adv_estimator")


def group_mean_std(values: Tensor, uid: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample mean and unbiased std of its uid group; values, uid: [B] -> ([B], [B]).

    A group of one sample gets mean 0 and std 1 (verl's convention), so its advantage is its score.
    """
    _, group = torch.unique(uid.to(values.device), return_inverse=True)  # [B] in 0..G-1
    num_groups = int(group.max()) + 1
    values = values.double()  # exact sums for the small groups we have; cast back at the end
    zeros = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    count = zeros.index_add(0, group, torch.ones_like(values))
    mean = zeros.index_add(0, group, values) / count
    sq_dev = (values - mean[group]) ** 2
    var = zeros.index_add(0, group, sq_dev) / (count - 1).clamp(min=1)
    single = count[group] == 1
    mean_b = torch.where(single, torch.zeros_like(values), mean[group])
    std_b = torch.where(single, torch.ones_like(values), var[group].sqrt())
    return mean_b.float(), std_b.float()


@ADV_ESTIMATORS.register(
    "grpo",
    "group-relative outcome advantage (r - mean_g) / (std_g + eps) (Shao et al. 2024, DeepSeekMath); "
    "norm_adv_by_std_in_grpo=false gives Dr.GRPO's r - mean_g",
    needs_groups=True,
)
def grpo(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    mask = inputs.response_mask
    scores = (inputs.token_level_rewards * mask).sum(-1)  # [B]
    mean, std = group_mean_std(scores, inputs.uid)
    adv = scores - mean
    if params.norm_adv_by_std_in_grpo:
        adv = adv / (std + params.epsilon)
    token_adv = adv[:, None] * mask  # [B, T]: every token of a response shares its advantage
    return AdvantageOutput(advantages=token_adv, returns=token_adv)
