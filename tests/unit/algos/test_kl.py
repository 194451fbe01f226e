"""KL estimators k1 / abs / k2 / k3 (Schulman 2020) and their registry names."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos.kl import K3_CLAMP, KL_ESTIMATORS, kl_penalty
from hybridrl.errors import ConfigError

# log_probs - ref_log_probs = x, one column per x: x = 0.5, -1, 0, 2
LP = torch.tensor([[-1.0, -2.0, -0.7, -0.5]])
REF = torch.tensor([[-1.5, -1.0, -0.7, -2.5]])

EXPECTED = {
    # k1 = x
    "k1": [0.5, -1.0, 0.0, 2.0],
    # |x|
    "abs": [0.5, 1.0, 0.0, 2.0],
    # k2 = x^2 / 2: 0.25/2 = 0.125, 1/2 = 0.5, 0, 4/2 = 2
    "k2": [0.125, 0.5, 0.0, 2.0],
    # k3 = exp(-x) + x - 1:
    #   x = 0.5: exp(-0.5) + 0.5 - 1 = 0.606531 - 0.5 = 0.106531
    #   x = -1:  exp(1) - 1 - 1 = 0.718282
    #   x = 0:   1 + 0 - 1 = 0
    #   x = 2:   exp(-2) + 2 - 1 = 1.135335
    "k3": [math.exp(-0.5) - 0.5, math.e - 2.0, 0.0, math.exp(-2.0) + 1.0],
}


@pytest.mark.parametrize("kind", ["k1", "abs", "k2", "k3"])
def test_kl_hand_values(kind):
    assert (LP - REF).tolist() == [[0.5, -1.0, 0.0, 2.0]]  # inputs are exact
    out = kl_penalty(LP, REF, kind)
    assert out.shape == (1, 4)
    assert torch.allclose(out[0], torch.tensor(EXPECTED[kind]), rtol=0, atol=1e-6), out
    assert EXPECTED["k3"][0] == pytest.approx(0.10653, abs=1e-5)


@pytest.mark.parametrize("alias, canonical", [("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3")])
def test_aliases_equal(alias, canonical):
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 7, generator=g) * 5
    ref = -torch.rand(3, 7, generator=g) * 5
    a, c = kl_penalty(lp, ref, alias), kl_penalty(lp, ref, canonical)
    assert torch.equal(a, c)
    assert c.abs().max() > 0.1  # non-trivial values
    assert KL_ESTIMATORS.entry(alias).doc == KL_ESTIMATORS.entry(canonical).doc


def test_k3_nonnegative_on_random_inputs():
    # exp(-x) + x - 1 >= 0 for all x (convexity); float64 so rounding near x = 0 cannot go below 0
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(64, 64, generator=g, dtype=torch.float64) * 3
    ref = torch.randn(64, 64, generator=g, dtype=torch.float64) * 3
    k3 = kl_penalty(lp, ref, "k3")
    assert (k3 >= 0).all()
    assert k3.max() > 1.0  # some values far from 0 ...
    # ... and k3 differs from k1 / k2 (it is not a symmetric estimator)
    assert not torch.allclose(k3, kl_penalty(lp, ref, "k2"))


def test_k3_clamped_for_extreme_inputs():
    # x = log π - log π_ref = -20: exp(20) - 20 - 1 ~ 4.85e8 -> clamped to 10
    # x = +50: exp(-50) + 50 - 1 = 49 -> clamped to 10
    # x = -2.2: exp(2.2) - 2.2 - 1 = 5.825 (below the clamp, unchanged)
    lp = torch.tensor([[-25.0, -1.0, -3.2, -1000.0]])
    ref = torch.tensor([[-5.0, -51.0, -1.0, -1.0]])
    out = kl_penalty(lp, ref, "k3")
    assert K3_CLAMP == 10.0
    assert out[0, :2].tolist() == [10.0, 10.0]
    assert out[0, 2].item() == pytest.approx(math.exp(2.2) - 3.2, abs=1e-5)
    assert out[0, 3].item() == 10.0  # exp(999) = inf in float32, still clamped to 10
    assert torch.isfinite(out).all()


def test_unknown_kind_raises_config_error_listing_names():
    with pytest.raises(ConfigError) as info:
        kl_penalty(LP, REF, "k4")
    msg = str(info.value)
    assert "actor_rollout_ref.actor.kl_loss_type" in msg
    assert "'k4'" in msg
    assert "abs, abs+, k1, k1+, k2, k2+, k3, k3+, kl, kl+, low_var_kl, low_var_kl+, mse, mse+" in msg


def test_kl_registry_names():
    base = ["abs", "k1", "k2", "k3", "kl", "low_var_kl", "mse"]
    assert KL_ESTIMATORS.names() == sorted(base + [b + "+" for b in base])
