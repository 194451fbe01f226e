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
    gamma: float = 1.0  # discount of token rewards (reinforce_plus_plus)


@dataclass
class AdvantageOutput:
    advantages: Tensor  # [B, T], 0 on padding
    returns: Tensor  # [B, T] value targets; outcome estimators use the advantages (as verl does)


Estimator = Callable[[AdvantageInputs, AdvantageParams], AdvantageOutput]
ADV_ESTIMATORS: Registry[Estimator] = Registry("advantage estimator", "algorithm.adv_estimator")


def group_sum(values: Tensor, uid: Tensor) -> Tensor:
    """Per-sample sum of `values` over the sample's uid group; values, uid: [B] -> [B]."""
    _, group = torch.unique(uid.to(values.device), return_inverse=True)  # [B] in 0..G-1
    sums = torch.zeros(int(group.max()) + 1, dtype=values.dtype, device=values.device).index_add(0, group, values)
    return sums[group]


def group_mean_std(values: Tensor, uid: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample mean and unbiased std of its uid group; values, uid: [B] -> ([B], [B]).

    A group of one sample gets mean 0 and std 1 (verl's convention), so its advantage is its score.
    """
    values = values.double()  # exact sums for the small groups we have; cast back at the end
    count = group_sum(torch.ones_like(values), uid)
    mean = group_sum(values, uid) / count
    var = group_sum((values - mean) ** 2, uid) / (count - 1).clamp(min=1)
    single = count == 1
    mean_b = torch.where(single, torch.zeros_like(values), mean)
    std_b = torch.where(single, torch.ones_like(values), var.sqrt())
    return mean_b.float(), std_b.float()


def _scores(inputs: AdvantageInputs) -> Tensor:
    return (inputs.token_level_rewards * inputs.response_mask).sum(-1)  # [B]


def _outcome(inputs: AdvantageInputs, adv: Tensor) -> AdvantageOutput:
    """Broadcast a per-response advantage [B] to its tokens; returns = advantages (outcome estimators)."""
    token_adv = adv[:, None] * inputs.response_mask
    return AdvantageOutput(advantages=token_adv, returns=token_adv)


@ADV_ESTIMATORS.register(
    "grpo",
    "group-relative outcome advantage (r - mean_g) / (std_g + eps) (Shao et al. 2024, DeepSeekMath); "
    "norm_adv_by_std_in_grpo=false gives Dr.GRPO's r - mean_g",
    needs_groups=True,
)
def grpo(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    scores = _scores(inputs)
    mean, std = group_mean_std(scores, inputs.uid)
    adv = scores - mean
    if params.norm_adv_by_std_in_grpo:
        adv = adv / (std + params.epsilon)
    return _outcome(inputs, adv)  # every token of a response shares its advantage


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the valid tokens of the whole batch; var is unbiased (Bessel)."""
    m = mask.bool()
    valid = values[m]
    if valid.numel() < 2:  # one token has no spread to normalize by
        return torch.zeros_like(values)
    return torch.where(m, (values - valid.mean()) / torch.sqrt(valid.var(unbiased=True) + eps), torch.zeros_like(values))


@ADV_ESTIMATORS.register(
    "rloo", "leave-one-out baseline r_i - mean of the other responses = n/(n-1) (r_i - mean_g) "
            "(Kool et al. 2019; Ahmadian et al. 2024); a group of one keeps its score", needs_groups=True)
def rloo(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    scores = _scores(inputs)
    count = group_sum(torch.ones_like(scores), inputs.uid)
    mean, _ = group_mean_std(scores, inputs.uid)
    adv = torch.where(count > 1, (scores - mean) * count / (count - 1).clamp(min=1), scores)
    return _outcome(inputs, adv)


@ADV_ESTIMATORS.register(
    "reinforce_plus_plus", "discounted return-to-go G_t = r_t + gamma G_{t+1}, whitened over the batch's tokens "
                           "(Hu 2025, REINFORCE++); no critic, no groups")
def reinforce_plus_plus(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    mask = inputs.response_mask.to(inputs.token_level_rewards.dtype)
    returns = torch.zeros_like(inputs.token_level_rewards)
    running = torch.zeros_like(returns[:, 0])
    for t in reversed(range(returns.shape[1])):  # T is the response length: a short Python loop
        running = (inputs.token_level_rewards[:, t] + params.gamma * running) * mask[:, t]
        returns[:, t] = running
    return AdvantageOutput(advantages=masked_whiten(returns, mask), returns=returns)


@ADV_ESTIMATORS.register(
    "reinforce_plus_plus_baseline", "r_i - mean_g on every token, then whitened over the batch's tokens "
                                    "(REINFORCE++ with a group baseline)", needs_groups=True)
def reinforce_plus_plus_baseline(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    scores = _scores(inputs)
    mean, _ = group_mean_std(scores, inputs.uid)
    adv = masked_whiten((scores - mean)[:, None] * inputs.response_mask, inputs.response_mask)
    return AdvantageOutput(advantages=adv, returns=adv)


@ADV_ESTIMATORS.register(
    "opo", "r_i - length-weighted group mean sum_j L_j r_j / sum_j L_j (Hao et al. 2025, On-Policy RL with "
           "Optimal reward baseline)", needs_groups=True)
def opo(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    scores = _scores(inputs)
    lengths = inputs.response_mask.sum(-1).to(scores.dtype)
    count = group_sum(torch.ones_like(scores), inputs.uid)
    baseline = group_sum(lengths * scores, inputs.uid) / group_sum(lengths, inputs.uid).clamp(min=1)
    return _outcome(inputs, torch.where(count > 1, scores - baseline, scores))


@ADV_ESTIMATORS.register(
    "grpo_passk", "pass@k: only each group's best response is credited, r_max - r_second, divided by the group "
                  "std when norm_adv_by_std_in_grpo (Chen et al. 2025, Pass@k training)", needs_groups=True)
def grpo_passk(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    scores = _scores(inputs)
    adv = torch.zeros_like(scores)
    _, std = group_mean_std(scores, inputs.uid)
    for g in torch.unique(inputs.uid):  # groups are few (train_batch_size); clarity over vectorization
        rows = (inputs.uid == g).nonzero().squeeze(-1)
        top = torch.topk(scores[rows], 2)  # needs_groups guarantees n >= 2
        best = rows[top.indices[0]]
        adv[best] = top.values[0] - top.values[1]
        if params.norm_adv_by_std_in_grpo:
            adv[best] = adv[best] / (std[best] + params.epsilon)
    return _outcome(inputs, adv)


@ADV_ESTIMATORS.register(
    "gpg", "alpha (r_i - mean_g) with alpha = batch size / number of non-zero rewards (Chu et al. 2025, GPG)",
    needs_groups=True)
def gpg(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    scores = _scores(inputs)
    mean, _ = group_mean_std(scores, inputs.uid)
    alpha = len(scores) / max(int(torch.count_nonzero(scores)), 1)
    return _outcome(inputs, alpha * (scores - mean))
