"""Truncated rollout importance weights, by hand."""

import math

import pytest
import torch

from hybridrl.algos.rollout_correction import RejectionBand, rejection_metrics, rollout_is_weights, rollout_rs_keep
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


# log ratios log(pi_old / pi_rollout) = 0.5, 0.0, -0.1 (ratios 1.6487, 1, 0.9048); sum 0.4 (1.4918), mean 0.1333 (1.1426)
RS_OLD = torch.tensor([[-1.0, -2.0, -0.5]])
RS_ROLLOUT = torch.tensor([[-1.5, -2.0, -0.4]])
RS_MASK = torch.ones(1, 3)


@pytest.mark.parametrize("level, upper, lower, kept", [
    ("token", 1.5, 1 / 1.5, [0.0, 1.0, 1.0]),  # 1.6487 > 1.5: only the first token goes
    ("token", 1.7, 0.95, [1.0, 1.0, 0.0]),  # 0.9048 < 0.95: the lower end rejects the last
    ("sequence", 1.5, 1 / 1.5, [1.0, 1.0, 1.0]),  # the product 1.4918 is inside
    ("sequence", 1.4, 1 / 1.4, [0.0, 0.0, 0.0]),  # ... and outside: the whole response goes
    ("geometric", 1.2, 1 / 1.2, [1.0, 1.0, 1.0]),  # geometric mean 1.1426 inside
    ("geometric", 1.1, 1 / 1.1, [0.0, 0.0, 0.0]),
])
def test_rejection_band_by_hand(level, upper, lower, kept):
    keep = rollout_rs_keep(RS_OLD, RS_ROLLOUT, RS_MASK, RejectionBand(level, upper, lower))
    assert keep.tolist() == [kept]


def test_rejection_ignores_padding_and_the_geometric_mean_counts_real_tokens_only():
    old, rollout = torch.tensor([[-1.0, -2.0, 0.0]]), torch.tensor([[-1.2, -2.0, -50.0]])  # padding: a huge ratio
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # geometric mean over the 2 real tokens: exp(0.2 / 2) = 1.1052 (over 3 it would be 1.0689)
    assert rollout_rs_keep(old, rollout, mask, RejectionBand("geometric", 1.08, 1 / 1.08)).tolist() == [[0, 0, 0]]
    assert rollout_rs_keep(old, rollout, mask, RejectionBand("geometric", 1.11, 1 / 1.11)).tolist() == [[1, 1, 0]]
    assert rollout_rs_keep(old, rollout, mask, RejectionBand("token", 1.3, 1 / 1.3)).tolist() == [[1, 1, 0]]


def test_rejection_metrics_count_tokens_and_wholly_rejected_responses():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    keep = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    assert rejection_metrics(mask, keep) == {"rollout_corr/rs_rejected_token_frac": pytest.approx(3 / 6),
                                             "rollout_corr/rs_rejected_seq_frac": pytest.approx(1 / 3)}


def test_rejection_levels_are_checked_against_the_registry():
    with pytest.raises(ConfigError, match="algorithm.rollout_correction.rollout_rs"):
        rollout_rs_keep(RS_OLD, RS_ROLLOUT, RS_MASK, RejectionBand("tokens", 1.5, 0.5))
