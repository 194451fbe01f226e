"""Per-token log-probs and entropies of responses under a causal LM."""

from __future__ import annotations

import torch
from torch import Tensor

from hybridrl.batch import Sequences, split


def device_of(module: torch.nn.Module) -> torch.device:
    """Where a module's weights live: batches arrive on the CPU and are moved there."""
    return next(module.parameters()).device


def position_ids_of(attention_mask: Tensor) -> Tensor:
    """[N, L] positions counting real tokens only, so left padding does not shift them."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def _response_logits(model, seqs: Sequences) -> Tensor:
    """The model's outputs at the positions that predict (or value) each response token; [N, T, ...].

    The output at position i concerns token i+1, so the T response tokens are covered by
    positions P-1 .. P+T-2.
    """
    T = seqs.response_mask.shape[1]
    return model(
        input_ids=seqs.input_ids,
        attention_mask=seqs.attention_mask,
        position_ids=position_ids_of(seqs.attention_mask),
        use_cache=False,
    ).logits[:, -T - 1:-1]


def response_log_probs(model, seqs: Sequences, temperature: float = 1.0,
                       with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """log π(a_t | s_t) of each response token at `temperature` (and the entropy of π(.|s_t)).

    Returns ([N, T], [N, T] or None), zero on padding.
    """
    logits = _response_logits(model, seqs)  # [N, T, V]
    logp_all = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    mask = seqs.response_mask
    lp = logp_all.gather(-1, seqs.response_ids.unsqueeze(-1)).squeeze(-1) * mask
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1) * mask
    return lp, entropy


@torch.no_grad()
def batched_log_probs(model, seqs: Sequences, temperature: float, micro_batch_size: int) -> Tensor:
    """response_log_probs over micro-batches, without gradients; [N, T]."""
    return torch.cat([response_log_probs(model, part, temperature)[0] for part in split(seqs, micro_batch_size)])


def response_values(model, seqs: Sequences) -> Tensor:
    """V(s_t) of the state before each response token, from a scalar-head model; [N, T], 0 on padding.

    Same shift as the log-probs: the value read at position i is that of the prefix up to i,
    i.e. the state in which token i+1 is chosen.
    """
    return _response_logits(model, seqs)[..., 0].float() * seqs.response_mask  # [N, T]


@torch.no_grad()
def batched_values(model, seqs: Sequences, micro_batch_size: int) -> Tensor:
    """response_values over micro-batches, without gradients; [N, T]."""
    return torch.cat([response_values(model, part) for part in split(seqs, micro_batch_size)])
