"""Loss reduction (`actor.loss_agg_mode`): per-token values -> one scalar.

The normalizer is the count over the whole mini-batch (every micro-batch on every
data-parallel worker), passed in as a `LossScale`. Summing the reduced micro-batch losses
(i.e. accumulating their gradients) then gives exactly the full mini-batch loss, however
the batch was split. verl's legacy path averages micro-batch means instead, which weights
tokens of short micro-batches more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from hybridrl.registry import Registry


@dataclass(frozen=True)
class LossScale:
    num_tokens: float  # sum of response_mask over the whole mini-batch
    num_seqs: float  # responses in the whole mini-batch
    norm_length: float = 1.0  # seq-mean-token-sum-norm's constant: loss_scale_factor or max_response_length

    @staticmethod
    def of(mask: Tensor, norm_length: float | None = None) -> "LossScale":
        """The scale of a batch reduced in one piece; mask [B, T]; norm_length defaults to T."""
        return LossScale(float(mask.sum()), float(mask.shape[0]), float(norm_length or mask.shape[1]))


Reducer = Callable[[Tensor, Tensor, LossScale], Tensor]


def _masked(values: Tensor, mask: Tensor) -> Tensor:
    """values with padding set to 0 by selection, so an inf/NaN under padding cannot leak (inf * 0 = NaN)."""
    return torch.where(mask.bool(), values, torch.zeros_like(values))
LOSS_AGG_MODES: Registry[Reducer] = Registry("loss aggregation mode", "actor_rollout_ref.actor.loss_agg_mode")


@LOSS_AGG_MODES.register("token-mean", "mean over every response token of the mini-batch (DAPO)")
def _token_mean(values: Tensor, mask: Tensor, scale: LossScale) -> Tensor:
    return _masked(values, mask).sum() / max(scale.num_tokens, 1.0)


@LOSS_AGG_MODES.register("token-sum", "sum over every response token of the mini-batch, no normaliser (verl's "
                                      "token-sum: the loss and its gradient grow with the batch and the lengths)")
def _token_sum(values: Tensor, mask: Tensor, scale: LossScale) -> Tensor:
    return _masked(values, mask).sum()


@LOSS_AGG_MODES.register("seq-mean-token-sum", "sum over a response's tokens, mean over responses")
def _seq_mean_token_sum(values: Tensor, mask: Tensor, scale: LossScale) -> Tensor:
    return _masked(values, mask).sum() / max(scale.num_seqs, 1.0)


@LOSS_AGG_MODES.register("seq-mean-token-mean", "mean over a response's tokens, then mean over responses (GRPO paper)")
def _seq_mean_token_mean(values: Tensor, mask: Tensor, scale: LossScale) -> Tensor:
    per_seq = _masked(values, mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
    return per_seq.sum() / max(scale.num_seqs, 1.0)


@LOSS_AGG_MODES.register(
    "seq-mean-token-sum-norm",
    "sum over tokens / (responses x a constant length: actor.loss_scale_factor, else data.max_response_length); "
    "Dr.GRPO (Liu et al. 2025): no per-response length normalization")
def _seq_mean_token_sum_norm(values: Tensor, mask: Tensor, scale: LossScale) -> Tensor:
    # verl divides the token sum by the length constant only, so its loss grows with the batch size;
    # we also average over responses (a constant factor, i.e. a learning-rate rescale) to keep the
    # loss scale independent of the batch and of how it is split.
    return _masked(values, mask).sum() / max(scale.num_seqs * scale.norm_length, 1.0)


def reduce_loss(values: Tensor, mask: Tensor, mode: str, scale: LossScale | None = None) -> Tensor:
    """values, mask: [B, T] -> scalar. `scale` defaults to this batch alone (no micro-batching)."""
    return LOSS_AGG_MODES.get(mode)(values, mask, scale if scale is not None else LossScale.of(mask))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of values where mask is 1; values, mask: [B, T] -> scalar."""
    return _masked(values, mask).sum() / mask.sum().clamp(min=1)
