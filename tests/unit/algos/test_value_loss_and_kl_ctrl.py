"""Clipped value loss, explained variance, the KL-in-reward controller and penalty."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algos.kl_ctrl import KLController, apply_kl_penalty
from hybridrl.algos.value_loss import clipped_value_loss, explained_variance
from hybridrl.errors import ConfigError


def test_clipped_value_loss_hand_values_and_gradient():
    # cliprange 0.5, old value 0 everywhere:
    #  a) V=1.0, R=2.0: V_clip = 0.5; (1-2)^2 = 1 < (0.5-2)^2 = 2.25 -> loss 0.5 * 2.25 = 1.125, clipped, no gradient
    #  b) V=0.2, R=1.0: V_clip = V; both 0.64 -> loss 0.32, not clipped (a tie is not "larger")
    #  c) V=1.5, R=0.9: V_clip = 0.5; (0.6)^2 = 0.36 > (0.4)^2 = 0.16 -> loss 0.18, not clipped, grad (V - R) = 0.6
    vpreds = torch.tensor([[1.0, 0.2, 1.5]], requires_grad=True)
    out = clipped_value_loss(vpreds, torch.zeros(1, 3), torch.tensor([[2.0, 1.0, 0.9]]), cliprange_value=0.5)
    torch.testing.assert_close(out.loss, torch.tensor([[1.125, 0.32, 0.18]]))
    assert out.clipped.tolist() == [[1.0, 0.0, 0.0]]
    out.loss.sum().backward()
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, 0.2 - 1.0, 0.6]]))


def test_values_inside_the_clip_range_are_never_counted_as_clipped():
    g = torch.Generator().manual_seed(0)
    # both in +-0.09, so always within 0.18 of each other; of opposite signs or scales V - old is
    # inexact, and old + (V - old) != V
    old = (torch.rand(64, 32, generator=g) - 0.5) * 0.18
    vpreds = (torch.rand(64, 32, generator=g) - 0.5) * 0.18
    returns = torch.randn(64, 32, generator=g)
    v_clip = old + (vpreds - old).clamp(-0.2, 0.2)
    assert ((v_clip - returns).square() > (vpreds - returns).square()).any()  # rounding alone would "clip" some
    out = clipped_value_loss(vpreds, old, returns, 0.2)
    assert out.clipped.sum() == 0


def test_explained_variance_edges():
    mask = torch.ones(1, 4)
    returns = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    assert explained_variance(returns, returns, mask) == 1.0  # perfect critic
    assert explained_variance(torch.full((1, 4), 1.5), returns, mask) == 0.0  # a constant: no better than the mean
    assert explained_variance(torch.zeros(1, 4), torch.ones(1, 4), mask) == 0.0  # no variance to explain
    near_constant = torch.tensor([[0.3, 0.3 + 1e-9, 0.3, 0.3]])  # rounding noise only: still nothing to explain
    assert explained_variance(torch.zeros(1, 4), near_constant, mask) == 0.0
    noisy = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # a critic far off returns that do vary (by 0.01): a real ratio
    assert explained_variance(noisy, torch.tensor([[0.3, 0.31, 0.3, 0.3]]), mask) < -100


def test_fixed_controller_never_moves():
    ctrl = KLController(0.05, "fixed")
    ctrl.update(current_kl=3.0, n_steps=1000)
    assert ctrl.value == 0.05


def test_adaptive_controller_follows_ziegler():
    # target 0.1, horizon 100, 10 responses:
    #   KL 0.15 -> error clip(0.5, -0.2, 0.2) = 0.2 -> beta * (1 + 0.2 * 10 / 100) = 0.1 * 1.02 = 0.102
    #   KL 0.09 -> error -0.1 -> 0.102 * (1 - 0.1 * 10 / 100) = 0.102 * 0.99 = 0.10098
    ctrl = KLController(0.1, "adaptive", target_kl=0.1, horizon=100)
    ctrl.update(0.15, 10)
    assert ctrl.value == pytest.approx(0.102)
    ctrl.update(0.09, 10)
    assert ctrl.value == pytest.approx(0.10098)


def test_unknown_controller_names_the_key():
    with pytest.raises(ConfigError, match=r"algorithm\.kl_ctrl\.type='pid'.*fixed, adaptive"):
        KLController(0.1, "pid")


def test_kl_penalty_hand_values_and_padding():
    # k1 = log π - log π_ref = [-1 + 1.5, -2 + 1, padding] = [0.5, -1, 0]; beta 0.1
    # rewards [0, 1, 0] - 0.1 * [0.5, -1, 0] = [-0.05, 1.1, 0]; current KL = mean over valid tokens = -0.25
    rewards, kl = apply_kl_penalty(torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([[-1.0, -2.0, 0.0]]),
                                   torch.tensor([[-1.5, -1.0, 5.0]]), torch.tensor([[1.0, 1.0, 0.0]]), "kl", 0.1)
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 1.1, 0.0]]))
    assert kl == pytest.approx(-0.25)
