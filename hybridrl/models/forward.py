"""Per-token log-probs and entropies of responses under a causal LM."""

from __future__ import annotations

import torch
from torch import Tensor

from hybridrl import progress
from hybridrl.batch import Sequences, split


def device_of(module: torch.nn.Module) -> torch.device:
    """Where a module's weights live: batches arrive on the CPU and are moved there."""
    return next(module.parameters()).device


def position_ids_of(attention_mask: Tensor) -> Tensor:
    """[N, L] positions counting real tokens only, so left padding does not shift them."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def distinct_prompts(input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(first row of each distinct prompt [U], each row's distinct prompt [N]). GRPO-style batches
    hold n responses per prompt, so U is about N / n."""
    rows = torch.cat([input_ids, attention_mask], dim=1)
    uniq, inverse = torch.unique(rows, dim=0, return_inverse=True)
    first = torch.full((len(uniq),), len(rows), dtype=torch.long, device=rows.device)
    first = first.scatter_reduce(0, inverse, torch.arange(len(rows), device=rows.device), reduce="amin")
    return first, inverse


def prefill_distinct(model, prompt_ids: Tensor, prompt_mask: Tensor, groups: tuple[Tensor, Tensor]):
    """Forward each distinct prompt once, then give every row its prompt's keys and values (the
    prompt-prefix sharing of Liu et al. 2025, "Prefix Grouper"). Returns the last prompt position's
    outputs per row [N, 1, ...] and a DynamicCache of N rows. With gradients enabled the row gather
    sums each group's gradients into its one prompt forward: the same gradient as N separate
    forwards, with N - U fewer prompt passes."""
    from transformers import DynamicCache

    first, inverse = groups
    shared = DynamicCache()
    ids, mask = prompt_ids[first], prompt_mask[first]
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_of(mask), past_key_values=shared,
                use_cache=True, logits_to_keep=1).logits  # [U, 1, ...]
    # index_select, not x[inverse]: the backward of advanced indexing accumulates the group's gradients
    # in a varying order on CPU (runs stop being bit-reproducible); index_select's backward does not.
    for layer in shared.layers:
        layer.keys, layer.values = layer.keys.index_select(0, inverse), layer.values.index_select(0, inverse)
    return out.index_select(0, inverse), shared


def _response_logits(model, seqs: Sequences, share_prompts: bool = False) -> Tensor:
    """The model's outputs at the positions that predict (or value) each response token; [N, T, ...].

    The output at position i concerns token i+1, so the T response tokens are covered by
    positions P-1 .. P+T-2. With `share_prompts`, rows with the same prompt run its forward once
    (prefill_distinct) and only their responses separately; exact up to rounding.
    """
    T = seqs.response_mask.shape[1]
    positions = position_ids_of(seqs.attention_mask)
    if not share_prompts:
        return model(input_ids=seqs.input_ids, attention_mask=seqs.attention_mask, position_ids=positions,
                     use_cache=False).logits[:, -T - 1:-1]
    # Two forwards whatever the batch holds (one when T is 1): sharded (fsdp2) ranks must run the same count.
    P = seqs.input_ids.shape[1] - T
    groups = distinct_prompts(seqs.input_ids[:, :P], seqs.attention_mask[:, :P])
    last_prompt, cache = prefill_distinct(model, seqs.input_ids[:, :P], seqs.attention_mask[:, :P], groups)
    if T == 1:
        return last_prompt
    rest = model(input_ids=seqs.input_ids[:, P:-1], attention_mask=seqs.attention_mask[:, :-1],
                 position_ids=positions[:, P:-1], past_key_values=cache, use_cache=True).logits  # [N, T-1, ...]
    return torch.cat([last_prompt, rest], dim=1)


def response_log_probs(model, seqs: Sequences, temperature: float = 1.0, with_entropy: bool = False,
                       share_prompts: bool = False) -> tuple[Tensor, Tensor | None]:
    """log π(a_t | s_t) of each response token at `temperature` (and the entropy of π(.|s_t)).

    Returns ([N, T], [N, T] or None), zero on padding.
    """
    logits = _response_logits(model, seqs, share_prompts)  # [N, T, V]
    logp_all = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    mask = seqs.response_mask
    lp = logp_all.gather(-1, seqs.response_ids.unsqueeze(-1)).squeeze(-1) * mask
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1) * mask
    return lp, entropy


@torch.no_grad()
def batched_log_probs(model, seqs: Sequences, temperature: float, micro_batch_size: int,
                      share_prompts: bool = False) -> Tensor:
    """response_log_probs over micro-batches, without gradients; [N, T]."""
    return torch.cat([response_log_probs(model, part, temperature, share_prompts=share_prompts)[0]
                      for part in progress.counted(split(seqs, micro_batch_size), "micro-batch")])


def response_values(model, seqs: Sequences) -> Tensor:
    """V(s_t) of the state before each response token, from a scalar-head model; [N, T], 0 on padding.

    Same shift as the log-probs: the value read at position i is that of the prefix up to i,
    i.e. the state in which token i+1 is chosen.
    """
    return _response_logits(model, seqs)[..., 0].float() * seqs.response_mask  # [N, T]


@torch.no_grad()
def batched_values(model, seqs: Sequences, micro_batch_size: int) -> Tensor:
    """response_values over micro-batches, without gradients; [N, T]."""
    return torch.cat([response_values(model, part) for part in progress.counted(split(seqs, micro_batch_size),
                                                                                "micro-batch")])
