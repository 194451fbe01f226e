"""Advantage estimators (`algorithm.adv_estimator`), pure functions in one registry.

Every estimator has the signature `(AdvantageInputs, AdvantageParams) -> AdvantageOutput`,
so the trainer calls `ADV_ESTIMATORS.get(name)(inputs, params)` whatever the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from hybridrl.registry import Registry


@dataclass
class AdvantageInputs:
    token_level_rewards: Tensor  # [B, T] reward per response token (outcome scores sit on the last token)
    response_mask: Tensor  # [B, T] 1 on generated tokens, 0 on padding
    uid: Tensor  # [B] long; the n responses sampled for one prompt share a uid
    values: Optional[Tensor] = None  # [B, T] critic's V(s_t) on response tokens, 0 on padding (gae only)
    baselines: Optional[Tensor] = None  # [B] score of the greedy response to the same prompt (remax only)


@dataclass(frozen=True)
class AdvantageParams:
    norm_adv_by_std_in_grpo: bool = True  # False: Dr.GRPO (Liu et al. 2025) drops the std division
    epsilon: float = 1e-6  # keeps the division finite for zero-variance groups
    gamma: float = 1.0  # discount of token rewards (gae, reinforce_plus_plus)
    lam: float = 1.0  # GAE's lambda


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


def discounted_returns(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """Return-to-go G_t = r_t + gamma G_{t+1} within each response, 0 on padding; [B, T] -> [B, T].

    Masked positions inside a response (tool tokens of a multi-turn rollout) are skipped, not
    ends: the return flows through them to the model's earlier turns, undiscounted by them."""
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(returns[:, 0])
    for t in reversed(range(returns.shape[1])):  # T is the response length: a short Python loop
        running = torch.where(mask[:, t] > 0, rewards[:, t] + gamma * running, running)
        returns[:, t] = running * mask[:, t]
    return returns


@ADV_ESTIMATORS.register(
    "reinforce_plus_plus", "discounted return-to-go G_t = r_t + gamma G_{t+1}, whitened over the batch's tokens "
                           "(Hu 2025, REINFORCE++); no critic, no groups")
def reinforce_plus_plus(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    mask = inputs.response_mask.to(inputs.token_level_rewards.dtype)
    returns = discounted_returns(inputs.token_level_rewards, mask, params.gamma)
    return AdvantageOutput(advantages=masked_whiten(returns, mask), returns=returns)


@ADV_ESTIMATORS.register(
    "gae", "generalized advantage estimation with the critic's values (Schulman et al. 2016): "
           "delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lam A_{t+1}, returns = A + V, "
           "A whitened over the batch", needs_critic=True)
def gae(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    if inputs.values is None:
        raise ValueError("gae needs the critic's values (AdvantageInputs.values)")
    mask = inputs.response_mask.to(inputs.token_level_rewards.dtype)
    values = inputs.values * mask  # V = 0 past the end: the episode is over
    adv = torch.zeros_like(values)
    running = torch.zeros_like(values[:, 0])
    next_value = torch.zeros_like(running)  # V of the next unmasked token (0 past the end)
    for t in reversed(range(values.shape[1])):
        # masked tokens inside a response (a multi-turn rollout's tool tokens) are skipped: the next
        # state of a model token is the next model token, as if the tool's tokens were the environment
        valid = mask[:, t] > 0
        delta = inputs.token_level_rewards[:, t] + params.gamma * next_value - values[:, t]
        running = torch.where(valid, delta + params.gamma * params.lam * running, running)
        next_value = torch.where(valid, values[:, t], next_value)
        adv[:, t] = running * mask[:, t]
    returns = (adv + values) * mask  # the critic's regression target (before whitening)
    return AdvantageOutput(advantages=masked_whiten(adv, mask), returns=returns)


@ADV_ESTIMATORS.register(
    "remax", "G_t - b with b the score of the greedy response to the same prompt (Li et al. 2023, ReMax); "
             "the trainer runs the extra greedy rollout", needs_greedy_baseline=True)
def remax(inputs: AdvantageInputs, params: AdvantageParams) -> AdvantageOutput:
    if inputs.baselines is None:
        raise ValueError("remax needs the greedy responses' scores (AdvantageInputs.baselines)")
    mask = inputs.response_mask.to(inputs.token_level_rewards.dtype)
    returns = discounted_returns(inputs.token_level_rewards, mask, 1.0)  # undiscounted, as in the paper
    adv = (returns - inputs.baselines[:, None]) * mask
    return AdvantageOutput(advantages=adv, returns=returns)


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
