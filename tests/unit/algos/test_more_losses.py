"""Hand-derived values and gradients for gspo, cispo, gpg, sapo and the straight-through KL '+' variants."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos.kl import kl_penalty
from hybridrl.algos.policy_losses import POLICY_LOSSES, PolicyLossParams


def run(name, new, old, adv, mask=None, **params):
    new = torch.tensor([new], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([old], dtype=torch.float64)
    adv = torch.tensor([adv], dtype=torch.float64)
    mask = torch.ones_like(old) if mask is None else torch.tensor([mask], dtype=torch.float64)
    out = POLICY_LOSSES.get(name)(new, old, adv, mask, PolicyLossParams(**params))
    (out.loss * mask).sum().backward()
    return out, new.grad[0].tolist()


def test_gspo_uses_one_ratio_per_sequence_with_token_gradients():
    # token log-ratios 0.1 and -0.1 average to 0: s = 1 on both tokens; A = 2 -> loss -2 each,
    # and each token's gradient is -A * s = -2 (not divided by the length)
    out, grad = run("gspo", [-1.0, -2.0], [-1.1, -1.9], [2.0, 2.0])
    assert out.loss[0].tolist() == pytest.approx([-2.0, -2.0])
    assert grad == pytest.approx([-2.0, -2.0])
    # log-ratios 0.3 and 0.1 -> s = e^0.2 = 1.2214 > 1.2: clipped for A > 0, loss -1.2, no gradient
    out, grad = run("gspo", [0.3, 0.1], [0.0, 0.0], [1.0, 1.0])
    assert out.loss[0].tolist() == pytest.approx([-1.2, -1.2]) and grad == pytest.approx([0.0, 0.0])
    assert out.clipped[0].tolist() == [1.0, 1.0]


def test_gspo_sequence_ratio_ignores_padding():
    # the padded token's log-ratio 5.0 must not enter the mean: s = e^0 = 1
    out, _ = run("gspo", [0.2, 5.0], [0.2, 0.0], [1.0, 1.0], mask=[1.0, 0.0])
    assert out.loss[0, 0].item() == pytest.approx(-1.0)


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    # ratio e > 1.2 -> weight 1.2 (detached); loss = -A * 1.2 * log pi; d/dlog pi = -1.2 * A
    out, grad = run("cispo", [0.0], [-1.0], [1.0])
    assert out.loss[0].tolist() == pytest.approx([0.0]) and grad == pytest.approx([-1.2])
    assert out.clipped[0].tolist() == [1.0]
    # ratio e^-1 = 0.368 < 0.8 -> weight 0.8; A = -1 -> gradient 0.8
    _, grad = run("cispo", [-1.0], [0.0], [-1.0])
    assert grad == pytest.approx([0.8])


def test_gpg_is_plain_policy_gradient():
    out, grad = run("gpg", [-0.5, -2.0], [-9.0, 3.0], [1.5, -1.0])
    assert out.loss[0].tolist() == pytest.approx([0.75, -2.0]) and grad == pytest.approx([-1.5, 1.0])


def test_sapo_gate_at_ratio_one_and_its_gradient():
    # r = 1: gate sigmoid(0) * 4 / tau = 2 / tau; tau 1 for A > 0, 1.05 for A < 0
    out, grad = run("sapo", [-1.0, -1.0], [-1.0, -1.0], [1.0, -1.0])
    assert out.loss[0].tolist() == pytest.approx([-2.0, 2 / 1.05])
    # d gate / d log pi at r = 1: tau * 1/4 * 4 / tau = 1 -> the plain policy gradient -A
    assert grad == pytest.approx([-1.0, 1.0])
    # far from r = 1 the gate saturates: r = e^2, A = 1: sigmoid(6.389) * 4 = 3.9934, gradient ~ 0.1 (soft, not 0)
    out, grad = run("sapo", [2.0], [0.0], [1.0])
    s = 1 / (1 + math.exp(-(math.e ** 2 - 1)))
    assert out.loss[0, 0].item() == pytest.approx(-4 * s) and grad[0] == pytest.approx(-4 * s * (1 - s) * math.e ** 2)


@pytest.mark.parametrize("base", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_plus_variants_have_the_base_value_and_k2_gradient(base):
    lp = torch.tensor([[0.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-0.5, -0.25]])
    plus = kl_penalty(lp, ref, base + "+")
    assert torch.allclose(plus, kl_penalty(lp, ref, base))
    plus.sum().backward()
    # k2 = (lp - ref)^2 / 2 has gradient lp - ref: 0.5 and -0.75
    assert lp.grad[0].tolist() == pytest.approx([0.5, -0.75])
