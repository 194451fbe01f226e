"""Truncated rollout importance weights, by hand."""

import math

import pytest
import torch

from hybridrl.algos.rollout_correction import rollout_is_weights
from hybridrl.errors import ConfigError

OLD = torch.tensor([[math.log(0.5), math.log(0.2), 0.0], [math.log(0.9), math.log(0.3), math.log(0.4)]])
ROLLOUT = torch.tensor([[math.log(0.25), math.log(0.4), -7.0], [math.log(0.3), math.log(0.3), math.log(0.1)]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])


def test_token_weights_are_ratios_capped_at_the_threshold():
    w, truncated = rollout_is_weights(OLD, ROLLOUT, MASK, "token", threshold=2.5)
    # ratios 0.5/0.25 = 2, 0.2/0.4 = 0.5, padding -> 0; 0.9/0.3 = 3 -> 2.5 (capped), 1, 0.4/0.1 = 4 -> 2.5
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 0.0], [2.5, 1.0, 2.5]]), atol=1e-6)
    assert truncated.tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 1.0]]


def test_sequence_weights_are_one_product_per_response():
    w, truncated = rollout_is_weights(OLD, ROLLOUT, MASK, "sequence", threshold=20.0)
    # row 0: 2 x 0.5 = 1 (the padded token's huge ratio does not count); row 1: 3 x 1 x 4 = 12
    assert torch.allclose(w, torch.tensor([[1.0, 1.0, 0.0], [12.0, 12.0, 12.0]]), atol=1e-5)
    assert truncated.sum() == 0
    capped, _ = rollout_is_weights(OLD, ROLLOUT, MASK, "sequence", threshold=5.0)
    assert torch.allclose(capped[1], torch.full((3,), 5.0))


def test_weights_carry_no_gradient_and_unknown_levels_name_the_key():
    old = OLD.clone().requires_grad_(True)
    w, _ = rollout_is_weights(old, ROLLOUT, MASK, "token", threshold=2.0)
    assert not w.requires_grad
    with pytest.raises(ConfigError, match="algorithm.rollout_correction.rollout_is='tokens'"):
        rollout_is_weights(OLD, ROLLOUT, MASK, "tokens", threshold=2.0)
