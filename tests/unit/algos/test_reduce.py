"""Loss reduction: hand values, padding, and micro-batch / shard invariance with a global LossScale."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algos.reduce import LOSS_AGG_MODES, LossScale, masked_mean, reduce_loss
from hybridrl.errors import ConfigError

MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]

# 2 x 3 example; row 0 has 3 valid tokens, row 1 has 1 (two padded positions)
VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])

HAND = {
    # all valid tokens: (1 + 2 + 3 + 4) / 4 tokens = 2.5
    "token-mean": 2.5,
    # all valid tokens summed, no normaliser (verl's token-sum): 1 + 2 + 3 + 4 = 10
    "token-sum": 10.0,
    # per-row token sums 6 and 4, mean over 2 rows: (6 + 4) / 2 = 5.0
    "seq-mean-token-sum": 5.0,
    # per-row token means 6/3 = 2 and 4/1 = 4, mean over 2 rows: (2 + 4) / 2 = 3.0
    "seq-mean-token-mean": 3.0,
    # token sums 6 + 4 = 10 over 2 rows x the constant length (default: the padded width 3): 10 / 6
    "seq-mean-token-sum-norm": 10 / 6,
}


@pytest.mark.parametrize("mode", MODES)
def test_reduce_hand_values(mode):
    out = reduce_loss(VALUES, MASK, mode)
    assert out.dim() == 0
    assert out.item() == pytest.approx(HAND[mode], abs=1e-7)


def test_loss_scale_of():
    # 4 valid tokens, 2 responses
    assert LossScale.of(MASK) == LossScale(num_tokens=4.0, num_seqs=2.0, norm_length=3.0)


@pytest.mark.parametrize("mode", MODES)
def test_explicit_scale(mode):
    # With a scale of a larger batch (8 tokens, 4 responses), the same values count half as much:
    #   token-mean: 10 / 8 = 1.25; seq-mean-token-sum: 10 / 4 = 2.5; seq-mean-token-mean: 6 / 4 = 1.5;
    #   seq-mean-token-sum-norm with a constant length of 5 (Dr.GRPO's max_response_length): 10 / (4 * 5) = 0.5
    #   token-sum: 10 whatever the scale (no normaliser)
    expected = {"token-mean": 1.25, "token-sum": 10.0, "seq-mean-token-sum": 2.5, "seq-mean-token-mean": 1.5,
                "seq-mean-token-sum-norm": 0.5}[mode]
    out = reduce_loss(VALUES, MASK, mode, LossScale(num_tokens=8.0, num_seqs=4.0, norm_length=5.0))
    assert out.item() == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_padding_never_contributes(mode):
    dirty = VALUES.clone()
    dirty[1, 1:] = torch.tensor([1e6, -7.0])
    assert reduce_loss(dirty, MASK, mode).item() == pytest.approx(HAND[mode], abs=1e-7)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        noisy = torch.where(MASK.bool(), VALUES, torch.randn(2, 3, generator=g) * 100)
        assert reduce_loss(noisy, MASK, mode).item() == pytest.approx(HAND[mode], abs=1e-6)


def _random_batch(B=8, T=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(B, T, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0], lengths[1] = 1, T  # make sure lengths are very uneven
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    return values, mask


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sizes", [(3, 1, 4), (1, 1, 6), (8,), (2, 2, 2, 2), (5, 3)])
def test_micro_batch_split_sums_to_full_batch(mode, sizes):
    values, mask = _random_batch()
    full = reduce_loss(values, mask, mode)
    scale = LossScale.of(mask)
    parts = torch.split(torch.arange(8), list(sizes))
    total = sum(reduce_loss(values[p], mask[p], mode, scale) for p in parts)
    assert torch.allclose(total, full, rtol=0, atol=1e-12)


def test_micro_batch_split_is_not_trivially_equal():
    # Sanity: with each micro-batch's own scale, averaging micro-batch token-means differs from the
    # full token-mean (uneven lengths), so the invariance above really depends on the global scale.
    values, mask = _random_batch()
    full = reduce_loss(values, mask, "token-mean")
    parts = torch.split(torch.arange(8), [3, 1, 4])
    naive = sum(reduce_loss(values[p], mask[p], "token-mean") for p in parts) / 3
    assert abs(naive.item() - full.item()) > 1e-3


@pytest.mark.parametrize("mode", MODES)
def test_shards_with_global_scale_sum_to_full_batch(mode):
    # Two data-parallel shards (uneven: 5 and 3 responses, different token counts), each reduced with
    # the global mini-batch scale: their sum (the all-reduced gradient) equals the full-batch loss.
    values, mask = _random_batch(seed=3)
    scale = LossScale.of(mask)
    rows = torch.randperm(8, generator=torch.Generator().manual_seed(1))
    shard_a, shard_b = rows[:5], rows[5:]
    total = reduce_loss(values[shard_a], mask[shard_a], mode, scale) + reduce_loss(
        values[shard_b], mask[shard_b], mode, scale
    )
    assert torch.allclose(total, reduce_loss(values, mask, mode), rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_micro_batch_gradients_accumulate_to_full_batch_gradient(mode):
    values, mask = _random_batch(seed=5)
    scale = LossScale.of(mask)
    full_leaf = values.clone().requires_grad_(True)
    reduce_loss(full_leaf, mask, mode).backward()
    leaf = values.clone().requires_grad_(True)
    for p in torch.split(torch.arange(8), [3, 1, 4]):
        reduce_loss(leaf[p], mask[p], mode, scale).backward()
    assert torch.allclose(leaf.grad, full_leaf.grad, rtol=0, atol=1e-12)
    assert (full_leaf.grad[mask == 0] == 0).all()


def test_empty_mask_gives_zero_not_nan():
    values = torch.ones(2, 3)
    mask = torch.zeros(2, 3)
    # token-mean: 0 / max(0, 1) = 0; seq modes: 0 / 2 = 0
    for mode in MODES:
        out = reduce_loss(values, mask, mode)
        assert out.item() == 0.0


def test_masked_mean_hand_value():
    # mask picks 1, 3 and 5: (1 + 3 + 5) / 3 = 3.0
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    assert masked_mean(VALUES, mask).item() == pytest.approx(3.0, abs=1e-7)
    # with MASK: (1 + 2 + 3 + 4) / 4 = 2.5
    assert masked_mean(VALUES, MASK).item() == pytest.approx(2.5, abs=1e-7)
    # an all-zero mask gives 0, not NaN
    assert masked_mean(VALUES, torch.zeros(2, 3)).item() == 0.0


def test_unknown_mode_raises_config_error_listing_values():
    with pytest.raises(ConfigError) as info:
        reduce_loss(VALUES, MASK, "token-max")
    msg = str(info.value)
    assert "actor_rollout_ref.actor.loss_agg_mode" in msg
    assert "'token-max'" in msg
    assert "seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm, token-mean, token-sum" in msg
    assert LOSS_AGG_MODES.names() == sorted(MODES)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_inf_or_nan_under_padding_does_not_leak(mode):
    # padding is dropped by selection, not multiplied by 0 (inf * 0 would be NaN)
    values = torch.tensor([[1.0, 2.0, float("inf")], [3.0, float("nan"), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    clean = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    assert torch.equal(reduce_loss(values, mask, mode), reduce_loss(clean, mask, mode))
