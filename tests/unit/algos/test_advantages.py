"""GRPO advantage estimator: hand values, padding, group bookkeeping, invariances."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from hybridrl.algos.advantages import (
    ADV_ESTIMATORS,
    AdvantageInputs,
    AdvantageParams,
    group_mean_std,
)

EPS = AdvantageParams().epsilon  # 1e-6


def _batch(scores, lengths, uids, T=None, pad_reward=0.0):
    """token_level_rewards with each score on the last valid token, right-padded response_mask."""
    B = len(scores)
    T = T or max(lengths)
    rewards = torch.full((B, T), pad_reward, dtype=torch.float32)
    mask = torch.zeros(B, T, dtype=torch.float32)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        mask[i, :n] = 1.0
        rewards[i, :n] = 0.0
        if n > 0:
            rewards[i, n - 1] = s
    return AdvantageInputs(token_level_rewards=rewards, response_mask=mask, uid=torch.tensor(uids, dtype=torch.long))


def _grpo(inputs, **kw):
    return ADV_ESTIMATORS.get("grpo")(inputs, AdvantageParams(**kw))


def _reference(scores, uids, norm=True, eps=EPS):
    """Plain-Python GRPO: per uid, (s - mean) / (unbiased std + eps); singletons: mean 0, std 1."""
    groups: dict[int, list[float]] = {}
    for s, u in zip(scores, uids):
        groups.setdefault(u, []).append(s)
    out = []
    for s, u in zip(scores, uids):
        g = groups[u]
        if len(g) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = statistics.fmean(g), statistics.stdev(g)
        out.append((s - mean) / (std + eps) if norm else s - mean)
    return out


def test_grpo_hand_values_and_padding():
    # Group uid=7, scores [1, 0, 0, 1]:
    #   mean = 0.5; squared deviations 0.25 each, sum 1.0; unbiased var = 1/3; std = sqrt(1/3) = 0.577350
    #   advantage of a 1 = +0.5 / (0.577350 + 1e-6) = 0.866024, of a 0 = -0.866024
    # Group uid=3, scores [2, 0, 1]:
    #   mean = 1; deviations [1, -1, 0]; var = (1 + 1 + 0) / 2 = 1; std = 1
    #   advantages = [1/(1+1e-6), -1/(1+1e-6), 0]
    lengths = [4, 2, 3, 1, 5, 2, 3]
    inputs = _batch([1, 0, 0, 1, 2, 0, 1], lengths, [7, 7, 7, 7, 3, 3, 3], T=6)
    out = _grpo(inputs)

    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert a == pytest.approx(0.866024, abs=1e-6)
    b = 1.0 / (1.0 + 1e-6)
    expected_seq = [a, -a, -a, a, b, -b, 0.0]

    assert out.advantages.shape == (7, 6)
    for i, (n, e) in enumerate(zip(lengths, expected_seq)):
        row = out.advantages[i]
        # broadcast to every valid token ...
        assert torch.allclose(row[:n], torch.full((n,), e), rtol=0, atol=1e-6), (i, row)
        # ... and exactly 0 on padding
        assert torch.equal(row[n:], torch.zeros(6 - n)), (i, row)


def test_grpo_ignores_rewards_on_padding():
    # Garbage rewards on padded positions must not leak into the score.
    clean = _batch([1, 0, 0, 1], [2, 3, 1, 4], [0, 0, 0, 0], T=5, pad_reward=0.0)
    dirty = _batch([1, 0, 0, 1], [2, 3, 1, 4], [0, 0, 0, 0], T=5, pad_reward=100.0)
    assert dirty.token_level_rewards[0, 4] == 100.0
    out_clean, out_dirty = _grpo(clean), _grpo(dirty)
    assert torch.equal(out_clean.advantages, out_dirty.advantages)


def test_dr_grpo_is_score_minus_group_mean():
    # norm_adv_by_std_in_grpo=False: [1, 0, 0, 1] - 0.5 = [0.5, -0.5, -0.5, 0.5];
    # [2, 0, 1] - 1 = [1, -1, 0]; no division by std.
    lengths = [3, 1, 2, 3, 2, 2, 1]
    inputs = _batch([1, 0, 0, 1, 2, 0, 1], lengths, [0, 0, 0, 0, 1, 1, 1])
    out = _grpo(inputs, norm_adv_by_std_in_grpo=False)
    expected_seq = torch.tensor([0.5, -0.5, -0.5, 0.5, 1.0, -1.0, 0.0])
    expected = expected_seq[:, None] * inputs.response_mask
    assert torch.allclose(out.advantages, expected, rtol=0, atol=1e-7)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_matches_python_reference_with_unsorted_uids(norm):
    g = torch.Generator().manual_seed(0)
    group_sizes = {42: 5, 3: 2, 17: 4, 9: 1, 100: 3}
    uids = [u for u, n in group_sizes.items() for _ in range(n)]
    perm = torch.randperm(len(uids), generator=g).tolist()
    uids = [uids[p] for p in perm]  # interleaved, unsorted
    assert uids != sorted(uids)
    scores = (torch.randn(len(uids), generator=g) * 2).tolist()
    lengths = torch.randint(1, 9, (len(uids),), generator=g).tolist()
    inputs = _batch(scores, lengths, uids, T=8)
    # the scores as the estimator sees them (float32)
    scores32 = inputs.token_level_rewards.sum(-1).double().tolist()

    out = _grpo(inputs, norm_adv_by_std_in_grpo=norm)
    expected_seq = torch.tensor(_reference(scores32, uids, norm=norm), dtype=torch.float32)
    expected = expected_seq[:, None] * inputs.response_mask
    assert torch.allclose(out.advantages, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm", [True, False])
def test_group_advantages_are_zero_mean(norm):
    g = torch.Generator().manual_seed(1)
    uids = torch.randint(0, 6, (40,), generator=g)
    scores = (torch.rand(40, generator=g) * 10 - 3).tolist()
    lengths = torch.randint(1, 6, (40,), generator=g).tolist()
    inputs = _batch(scores, lengths, uids.tolist(), T=5)
    out = _grpo(inputs, norm_adv_by_std_in_grpo=norm)
    seq_adv = out.advantages[:, 0]  # every response has >= 1 valid token
    checked = 0
    for u in uids.unique():
        sel = uids == u
        if sel.sum() < 2:
            continue
        checked += 1
        assert abs(seq_adv[sel].double().mean().item()) < 1e-5
        assert seq_adv[sel].abs().max() > 0.01  # non-trivial
    assert checked >= 4


def test_zero_variance_group_gives_exact_zero():
    # Group 0: all 0.7 -> mean 0.7, std 0 -> (0.7 - 0.7) / (0 + eps) = 0 exactly.
    # Group 1: all 1.0. Group 2: all 0.0. Group 3 ([1, 0]) is a normal group: mean 0.5, std sqrt(0.5).
    inputs = _batch([0.7, 0.7, 0.7, 1, 1, 0, 0, 0, 1, 0], [2, 3, 1, 4, 2, 3, 3, 1, 2, 4],
                    [0, 0, 0, 1, 1, 2, 2, 2, 3, 3])
    for norm in (True, False):
        adv = _grpo(inputs, norm_adv_by_std_in_grpo=norm).advantages
        assert torch.isfinite(adv).all()
        assert torch.equal(adv[:8], torch.zeros_like(adv[:8]))
    adv = _grpo(inputs).advantages
    c = 0.5 / (math.sqrt(0.5) + 1e-6)  # 0.707106
    assert adv[8, 0].item() == pytest.approx(c, abs=1e-6)
    assert adv[9, 0].item() == pytest.approx(-c, abs=1e-6)


def test_singleton_group_gets_mean_zero_std_one():
    # A lone sample: mean 0, std 1 -> advantage = score / (1 + 1e-6) (== score under Dr.GRPO).
    inputs = _batch([3.0, -2.0, 1.0, 0.0], [2, 1, 3, 2], [5, 6, 7, 7])
    out = _grpo(inputs)
    assert out.advantages[0, 0].item() == pytest.approx(3.0 / (1 + 1e-6), abs=1e-6)
    assert out.advantages[1, 0].item() == pytest.approx(-2.0 / (1 + 1e-6), abs=1e-6)
    # the pair [1, 0]: mean 0.5, std sqrt(0.5)
    assert out.advantages[2, 0].item() == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-6), abs=1e-6)
    dr = _grpo(inputs, norm_adv_by_std_in_grpo=False)
    assert dr.advantages[0].tolist() == [3.0, 3.0, 0.0]
    assert dr.advantages[1].tolist() == [-2.0, 0.0, 0.0]

    mean, std = group_mean_std(torch.tensor([3.0, -2.0, 1.0, 0.0]), torch.tensor([5, 6, 7, 7]))
    assert mean.tolist() == [0.0, 0.0, 0.5, 0.5]
    assert std[:2].tolist() == [1.0, 1.0]
    assert std[2].item() == pytest.approx(math.sqrt(0.5), rel=1e-6)


def test_group_mean_std_unbiased():
    # values [1, 2, 3, 6] in one group: mean 3; deviations [-2, -1, 0, 3] -> sq sum 14; var 14/3
    mean, std = group_mean_std(torch.tensor([1.0, 2.0, 3.0, 6.0]), torch.tensor([0, 0, 0, 0]))
    assert mean.tolist() == [3.0] * 4
    assert torch.allclose(std, torch.full((4,), math.sqrt(14 / 3)), rtol=1e-6)


def test_returns_equal_advantages():
    inputs = _batch([1, 0, 2, 5, 1], [3, 1, 2, 3, 2], [0, 0, 1, 1, 1])
    for norm in (True, False):
        out = _grpo(inputs, norm_adv_by_std_in_grpo=norm)
        assert torch.equal(out.returns, out.advantages)
        assert out.advantages.abs().sum() > 0


def test_grpo_registered_with_needs_groups():
    entry = ADV_ESTIMATORS.entry("grpo")
    assert entry.meta.get("needs_groups") is True
