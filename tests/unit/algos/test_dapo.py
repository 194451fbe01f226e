"""DAPO's pieces: the overlong penalty and the zero-variance group filter."""

from __future__ import annotations

import torch

from hybridrl.algos.group_filter import groups_with_spread
from hybridrl.rewards.shaping import overlong_penalty


def test_overlong_penalty_is_linear_over_the_buffer():
    # L_max 8, buffer 4 -> free up to 4 tokens, then -(|y| - 4) / 4, -1 at 8
    lengths = torch.tensor([1, 4, 5, 7, 8])
    torch.testing.assert_close(overlong_penalty(lengths, 8, 4, 1.0), torch.tensor([0.0, 0.0, -0.25, -0.75, -1.0]))
    torch.testing.assert_close(overlong_penalty(lengths, 8, 4, 0.5), torch.tensor([0.0, 0.0, -0.125, -0.375, -0.5]))


def test_groups_with_spread():
    metric = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.1, 0.1, 0.1, 5.0, 1.0, 0.0])
    uid = torch.tensor([0, 0, 1, 1, 2, 2, 2, 3, 4, 4])
    # uid 0 all 1, uid 1 all 0, uid 2 all 0.1 (a mean-based test would see rounding noise: 0.3/3 != 0.1)
    # are dropped; uid 3 is a single response (kept: nothing to compare), uid 4 differs (kept)
    assert groups_with_spread(metric, uid).tolist() == [False] * 7 + [True] * 3


def test_group_filter_does_not_care_about_row_order():
    g = torch.Generator().manual_seed(0)
    metric = (torch.rand(24, generator=g) > 0.7).float()
    uid = torch.arange(6).repeat_interleave(4)
    perm = torch.randperm(24, generator=g)
    assert torch.equal(groups_with_spread(metric, uid)[perm], groups_with_spread(metric[perm], uid[perm]))
