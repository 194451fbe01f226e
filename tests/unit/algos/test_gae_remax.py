"""gae and remax: hand-worked values, padding, and the identities they must satisfy."""

from __future__ import annotations

import statistics

import pytest
import torch

from hybridrl.algos.advantages import ADV_ESTIMATORS, AdvantageInputs, AdvantageParams

# Two responses, T = 3. Row 0 uses all 3 tokens; row 1 has 2 tokens and one padding column
# whose reward and value are garbage that must never be read.
REWARDS = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 5.0]])
VALUES = torch.tensor([[0.5, 0.6, 0.7], [0.2, 0.4, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def _gae(gamma, lam, values=VALUES):
    inputs = AdvantageInputs(REWARDS * MASK, MASK, torch.tensor([0, 1]), values=values)
    return ADV_ESTIMATORS.get("gae")(inputs, AdvantageParams(gamma=gamma, lam=lam))


def test_gae_hand_values_with_padding():
    # gamma 0.9, lam 0.5 (gamma * lam = 0.45); V past the end is 0.
    # row 0: t2 delta = 1 + 0 - 0.7 = 0.3                        A2 = 0.3
    #        t1 delta = 0 + 0.9 * 0.7 - 0.6 = 0.03               A1 = 0.03 + 0.45 * 0.3 = 0.165
    #        t0 delta = 0 + 0.9 * 0.6 - 0.5 = 0.04               A0 = 0.04 + 0.45 * 0.165 = 0.11425
    # row 1: t1 delta = 1 + 0.9 * 0 - 0.4 = 0.6 (padding's 9.0 is not V_{t+1})   A1 = 0.6
    #        t0 delta = 0 + 0.9 * 0.4 - 0.2 = 0.16               A0 = 0.16 + 0.45 * 0.6 = 0.43
    # returns = A + V: row 0 [0.61425, 0.765, 1.0], row 1 [0.63, 1.0, 0 (padding)]
    out = _gae(0.9, 0.5)
    torch.testing.assert_close(out.returns, torch.tensor([[0.61425, 0.765, 1.0], [0.63, 1.0, 0.0]]))
    raw = [0.11425, 0.165, 0.3, 0.43, 0.6]  # advantages are whitened over the 5 valid tokens
    mean, std = statistics.fmean(raw), statistics.stdev(raw)
    expected = torch.tensor([[(a - mean) / std for a in raw[:3]], [(raw[3] - mean) / std, (raw[4] - mean) / std, 0.0]])
    torch.testing.assert_close(out.advantages, expected, atol=1e-4, rtol=1e-4)
    assert out.advantages[1, 2] == 0.0 and out.returns[1, 2] == 0.0


def test_gae_lambda_one_is_monte_carlo_and_lambda_zero_is_td():
    # lam = 1, gamma = 1: A_t = (sum of rewards from t on) - V_t, so returns = rewards-to-go
    out = _gae(1.0, 1.0)
    torch.testing.assert_close(out.returns, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]))
    # lam = 0: A_t = r_t + gamma V_{t+1} - V_t, one-step TD; returns = r_t + gamma V_{t+1}
    out = _gae(0.5, 0.0)
    # row 0: [0 + 0.5 * 0.6, 0 + 0.5 * 0.7, 1 + 0]; row 1: [0 + 0.5 * 0.4, 1 + 0, 0]
    torch.testing.assert_close(out.returns, torch.tensor([[0.3, 0.35, 1.0], [0.2, 1.0, 0.0]]))


def test_gae_advantages_are_whitened_over_valid_tokens():
    g = torch.Generator().manual_seed(3)
    mask = (torch.arange(7)[None] < torch.tensor([7, 3, 5, 1])[:, None]).float()
    inputs = AdvantageInputs(torch.randn(4, 7, generator=g) * mask, mask, torch.arange(4),
                             values=torch.randn(4, 7, generator=g))
    adv = ADV_ESTIMATORS.get("gae")(inputs, AdvantageParams(gamma=0.95, lam=0.9)).advantages
    valid = adv[mask.bool()]
    assert abs(valid.mean().item()) < 1e-6 and abs(valid.std().item() - 1.0) < 1e-4
    assert torch.all(adv[~mask.bool()] == 0)


def test_gae_needs_values():
    with pytest.raises(ValueError, match="critic's values"):
        ADV_ESTIMATORS.get("gae")(AdvantageInputs(REWARDS, MASK, torch.tensor([0, 1])), AdvantageParams())


def test_remax_subtracts_the_greedy_score_on_every_token():
    # scores 1 and 0 sit on the last tokens; the greedy responses scored 1 and 0.5
    # returns-to-go: row 0 [1, 1, 1], row 1 [0, 0, padding]
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    inputs = AdvantageInputs(rewards, MASK, torch.tensor([0, 1]), baselines=torch.tensor([1.0, 0.5]))
    out = ADV_ESTIMATORS.get("remax")(inputs, AdvantageParams())
    # advantages = returns - baseline: row 0 [0, 0, 0] (as good as greedy), row 1 [-0.5, -0.5, 0 (padding)]
    torch.testing.assert_close(out.advantages, torch.tensor([[0.0, 0.0, 0.0], [-0.5, -0.5, 0.0]]))
    torch.testing.assert_close(out.returns, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="greedy"):
        ADV_ESTIMATORS.get("remax")(AdvantageInputs(rewards, MASK, torch.tensor([0, 1])), AdvantageParams())


def test_registry_marks_what_the_trainer_must_provide():
    assert ADV_ESTIMATORS.entry("gae").meta == {"needs_critic": True}
    assert ADV_ESTIMATORS.entry("remax").meta == {"needs_greedy_baseline": True}
