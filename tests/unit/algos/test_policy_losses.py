"""PPO clipped surrogate ("vanilla"): hand values, asymmetric clip, dual clip, clamp, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos.policy_losses import LOG_RATIO_CLAMP, POLICY_LOSSES, PolicyLossParams

E = math.e  # 2.718282
E2 = math.exp(2.0)  # 7.389056
EM1 = math.exp(-1.0)  # 0.367879

def vanilla(log_probs, old_log_probs, advantages, params):
    """The vanilla loss ignores response_mask: pass ones."""
    return POLICY_LOSSES.get("vanilla")(log_probs, old_log_probs, advantages, torch.ones_like(log_probs), params)


def _run(log_ratio, adv, params=PolicyLossParams(), old=-3.0):
    """One token per case: old log-prob `old`, new = old + log_ratio (integers: exact in float32)."""
    lr = torch.tensor(log_ratio, dtype=torch.float32)
    old_lp = torch.full_like(lr, old)
    new_lp = old_lp + lr
    return vanilla(new_lp[None], old_lp[None], torch.tensor(adv, dtype=torch.float32)[None], params)


# (log_ratio, A, expected loss, expected clipped flag), defaults: clip 0.2 / 0.2, dual clip c = 3
HAND_CASES = [
    # ratio e = 2.718, A = +1: max(-A r, -A clip(r)) = max(-2.718, -1.2) = -1.2; clipped term taken
    (1.0, 1.0, -1.2, 1.0),
    # ratio e, A = -1: max(2.718, 1.2) = 2.718; dual clip min(2.718, 3 * 1) = 2.718 (e < 3)
    (1.0, -1.0, E, 0.0),
    # ratio e^2 = 7.389, A = -1: max(7.389, 1.2) = 7.389; dual clip min(7.389, 3) = 3.0.
    # `clipped` flags only the PPO clip (clip term 1.2 < 7.389), like verl's pg_clipfrac
    (2.0, -1.0, 3.0, 0.0),
    # ratio e^2, A = +1: max(-7.389, -1.2) = -1.2, clipped
    (2.0, 1.0, -1.2, 1.0),
    # ratio e^-1 = 0.3679, A = +1: max(-0.3679, -0.8) = -0.3679, unclipped
    (-1.0, 1.0, -EM1, 0.0),
    # ratio 0.3679, A = -1: max(0.3679, 0.8) = 0.8, clipped; dual: min(0.8, 3) = 0.8
    (-1.0, -1.0, 0.8, 1.0),
    # ratio 1, A = +2: -2 * 1 = -2
    (0.0, 2.0, -2.0, 0.0),
    # A = 0: loss 0 whatever the ratio
    (2.0, 0.0, 0.0, 0.0),
    # ratio e^2, A = -0.5: max(3.6945, 0.6) = 3.6945; dual: min(3.6945, 0.5 * 3 = 1.5) = 1.5
    (2.0, -0.5, 1.5, 0.0),
    # ratio e, A = +3: max(-8.1548, -3.6) = -3.6, clipped
    (1.0, 3.0, -3.6, 1.0),
]


def test_vanilla_hand_values():
    lrs, advs, losses, flags = map(list, zip(*HAND_CASES))
    out = _run(lrs, advs)
    assert out.loss.shape == (1, len(HAND_CASES))
    assert torch.allclose(out.loss[0], torch.tensor(losses), rtol=0, atol=1e-5), out.loss
    assert out.clipped[0].tolist() == flags
    assert out.clipped.dtype == torch.float32


def test_vanilla_marks_where_the_dual_clip_bounds_the_loss():
    """actor/pg_clipfrac_lower (verl's name): 1 only where A < 0 and -A c is below the clipped surrogate."""
    lrs, advs, _, _ = map(list, zip(*HAND_CASES))
    out = _run(lrs, advs)
    # hand cases 3 (ratio e^2, A = -1: 7.389 > 3) and 9 (ratio e^2, A = -0.5: 3.69 > 1.5) take the dual bound
    assert out.clipped_lower[0].tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 1, 0]
    for name in POLICY_LOSSES.names():
        if name != "vanilla":  # no dual clip: no lower clip fraction
            lp = torch.zeros(1, 2)
            assert POLICY_LOSSES.get(name)(lp, lp, -torch.ones(1, 2), torch.ones(1, 2), PolicyLossParams()).clipped_lower is None


def test_vanilla_asymmetric_clip_range():
    # low 0.2, high 0.28: the ratio is clipped to [0.8, 1.28]
    p = PolicyLossParams(clip_ratio_low=0.2, clip_ratio_high=0.28)
    cases = [
        # ratio e, A = +1: max(-2.718, -1.28) = -1.28 (symmetric 0.2 would give -1.2)
        (1.0, 1.0, -1.28, 1.0),
        # ratio 1.25 inside [0.8, 1.28], A = +1: -1.25, not clipped (symmetric 0.2 would clip to -1.2)
        (math.log(1.25), 1.0, -1.25, 0.0),
        # ratio 0.75 < 0.8, A = -1: max(0.75, 0.8) = 0.8, clipped by the low side
        (math.log(0.75), -1.0, 0.8, 1.0),
        # ratio 0.75, A = +1: max(-0.75, -0.8) = -0.75 (the pessimistic bound ignores the clip)
        (math.log(0.75), 1.0, -0.75, 0.0),
        # ratio 1.25, A = -1: max(1.25, 1.25) = 1.25 (inside the range)
        (math.log(1.25), -1.0, 1.25, 0.0),
    ]
    lrs, advs, losses, flags = map(list, zip(*cases))
    out = _run(lrs, advs, p)
    assert torch.allclose(out.loss[0], torch.tensor(losses), rtol=0, atol=1e-5), out.loss
    assert out.clipped[0].tolist() == flags

    # and the other way round: low 0.3, high 0.2 -> range [0.7, 1.2]
    p2 = PolicyLossParams(clip_ratio_low=0.3, clip_ratio_high=0.2)
    out2 = _run([math.log(0.75), math.log(1.25)], [-1.0, 1.0], p2)
    # ratio 0.75 inside [0.7, 1.2], A = -1: 0.75; ratio 1.25 > 1.2, A = +1: max(-1.25, -1.2) = -1.2
    assert torch.allclose(out2.loss[0], torch.tensor([0.75, -1.2]), rtol=0, atol=1e-5)
    assert out2.clipped[0].tolist() == [0.0, 1.0]


def test_dual_clip_constant_is_used():
    # ratio e^2 = 7.389, A = -1: with c = 5: min(7.389, 5) = 5; with c = 10: 7.389 (not capped)
    out5 = _run([2.0], [-1.0], PolicyLossParams(clip_ratio_c=5.0))
    out10 = _run([2.0], [-1.0], PolicyLossParams(clip_ratio_c=10.0))
    assert out5.loss.item() == pytest.approx(5.0, abs=1e-6)
    assert out10.loss.item() == pytest.approx(E2, abs=1e-5)


def test_ppo_kl_is_old_minus_new():
    g = torch.Generator().manual_seed(0)
    new = -torch.rand(3, 5, generator=g) * 4
    old = -torch.rand(3, 5, generator=g) * 4
    adv = torch.randn(3, 5, generator=g)
    out = vanilla(new, old, adv, PolicyLossParams())
    assert out.ppo_kl.shape == (3, 5)
    assert torch.allclose(out.ppo_kl, old - new, rtol=0, atol=1e-6)
    assert not torch.allclose(out.ppo_kl, new - old)  # sign matters


@pytest.mark.parametrize("log_ratio", [1000.0, -1000.0, 88.0, 200.0])
@pytest.mark.parametrize("adv", [1.0, -1.0, 0.5, -2.0])
def test_huge_log_ratio_is_finite(log_ratio, adv):
    old = torch.tensor([[-1.0]])
    new = (old + log_ratio).requires_grad_(True)
    out = vanilla(new, old, torch.tensor([[adv]]), PolicyLossParams())
    assert torch.isfinite(out.loss).all()
    assert torch.isfinite(out.ppo_kl).all()
    out.loss.sum().backward()
    assert torch.isfinite(new.grad).all()
    # the clamp makes the ratio exp(+-20): for A < 0 and a huge ratio, the dual clip gives -A * 3;
    # for A > 0 and a huge ratio, -A * 1.2; a tiny ratio and A < 0 gives -A * 0.8
    if log_ratio > 0:
        expected = -adv * 3.0 if adv < 0 else -adv * 1.2
    else:
        expected = -adv * 0.8 if adv < 0 else -adv * math.exp(-LOG_RATIO_CLAMP)
    assert out.loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-12)


def test_gradient_inside_clip_range_is_minus_adv_times_ratio():
    # Inside [1 - 0.2, 1 + 0.2] the surrogate is -A * exp(logp - old), so d/d logp = -A * ratio.
    g = torch.Generator().manual_seed(0)
    log_ratio = torch.empty(4, 6, dtype=torch.float64).uniform_(-0.15, 0.15, generator=g)
    old = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 3
    adv = torch.randn(4, 6, generator=g, dtype=torch.float64)
    new = (old + log_ratio).requires_grad_(True)
    out = vanilla(new, old, adv, PolicyLossParams())
    assert out.clipped.sum() == 0
    out.loss.sum().backward()
    ratio = torch.exp(new.detach() - old)
    assert torch.allclose(new.grad, -adv * ratio, rtol=1e-10, atol=1e-12)


def test_gradient_is_zero_when_clipped():
    # A = +1 with ratio e (clipped at 1.2) and A = -1 with ratio e^2 (dual clip at 3): constant loss.
    # A = -1 with ratio e (unclipped, under the dual clip): grad = -A * ratio = e.
    old = torch.tensor([[-3.0, -3.0, -3.0]])
    new = (old + torch.tensor([[1.0, 2.0, 1.0]])).requires_grad_(True)
    out = vanilla(new, old, torch.tensor([[1.0, -1.0, -1.0]]), PolicyLossParams())
    out.loss.sum().backward()
    assert torch.allclose(new.grad, torch.tensor([[0.0, 0.0, E]]), rtol=0, atol=1e-5)


def test_vanilla_is_registered_and_defaults():
    assert "vanilla" in POLICY_LOSSES
    p = PolicyLossParams()
    assert (p.clip_ratio_low, p.clip_ratio_high, p.clip_ratio_c) == (0.2, 0.2, 3.0)
    assert LOG_RATIO_CLAMP == 20.0
