"""Per-token log-probs, entropies and values of responses under a causal LM (or a value model).

How the sequences of a micro-batch enter the model is a `Layout`, chosen once from the config:
padded rows (trimmed to the micro-batch's own longest prompt and response), padded rows whose
prompts run once per group (a KV cache shared by the group), or packed rows without padding
(models/packing.py, optionally with one prompt copy per group). Every layout gives the same outputs
up to rounding; the roles never branch on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from hybridrl import progress
from hybridrl.batch import Sequences, select
from hybridrl.models.cache_api import cache_kwargs


@dataclass(frozen=True)
class Layout:
    share_prompts: bool = False  # model.share_prompt_prefix: each distinct prompt runs once per micro-batch
    packed: bool = False  # model.use_remove_padding: real tokens only, packed rows (models/packing.py)
    # packed rows are at least this many tokens (and at least the longest sequence). Attention over a row of
    # L tokens costs ~4·L·h FLOPs per token per layer against ~24·h² for the layer's matmuls, so rows of
    # about h tokens (the model's width) add at most ~1/6 to the matmul work while packing many short
    # sequences (or a whole group behind one prompt) per row; measured on tiny-arith (h=256), 16 prompts
    # x 8 responses: rows of 256 tokens trained 1.5x faster than rows of the longest sequence
    pack_width: int = 0


PLAIN = Layout()


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
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_of(mask), **cache_kwargs(model, shared),
                use_cache=True, logits_to_keep=1).logits  # [U, 1, ...]
    # index_select, not x[inverse]: the backward of advanced indexing accumulates the group's gradients
    # in a varying order on CPU (runs stop being bit-reproducible); index_select's backward does not.
    for layer in shared.layers:
        layer.keys, layer.values = layer.keys.index_select(0, inverse), layer.values.index_select(0, inverse)
    return out.index_select(0, inverse), shared


def trimmed(seqs: Sequences, min_response: int = 1) -> Sequences:
    """`seqs` without the prompt columns that are padding on every row (left) and the response columns
    that are padding on every row (right), keeping at least `min_response` response columns: the same
    outputs, fewer positions to compute."""
    T = seqs.response_mask.shape[1]
    P = seqs.input_ids.shape[1] - T
    used = seqs.attention_mask.any(0)
    first = int(used[:P].nonzero()[0]) if used[:P].any() else P - 1
    last = int(used[P:].nonzero()[-1]) + 1 if used[P:].any() else 1
    last = min(T, max(last, min_response))
    cols = torch.cat([torch.arange(first, P), torch.arange(P, P + last)]).to(seqs.input_ids.device)
    return Sequences(seqs.input_ids[:, cols], seqs.attention_mask[:, cols], seqs.response_mask[:, :last])


def _repad(out: Tensor, width: int) -> Tensor:
    """[N, t, ...] outputs of a trimmed batch back to [N, width, ...] with zeros."""
    if out.shape[1] == width:
        return out
    return torch.cat([out, out.new_zeros((out.shape[0], width - out.shape[1], *out.shape[2:]))], dim=1)


def _packed_logits(model, seqs: Sequences, layout: Layout, lm_head: bool) -> Tensor:
    """Outputs at the response-predicting positions of a packed forward; [N, T, ...]."""
    from hybridrl.models.packing import pack

    packed = pack(seqs, layout.share_prompts, layout.pack_width)
    device = seqs.input_ids.device
    kwargs = dict(input_ids=packed.input_ids.to(device), attention_mask=packed.attention_mask.to(device),
                  position_ids=packed.position_ids.to(device), use_cache=False)
    if lm_head:  # the head runs only on the columns read back: [R, K, V] instead of [R, L, V]
        out = model(**kwargs, logits_to_keep=packed.keep_cols.to(device)).logits
        return packed.gather(out, kept=True)
    return packed.gather(model(**kwargs).logits)


def _response_logits(model, seqs: Sequences, layout: Layout = PLAIN, lm_head: bool = True) -> tuple[Tensor, Sequences]:
    """The model's outputs at the positions that predict (or value) each response token, [N, t, ...],
    and the sequences they line up with: `seqs`, or in the padded layouts `seqs` trimmed to t <= T
    response columns (the caller pads its results back with _repad).

    The output at position i concerns token i+1, so the T response tokens are covered by
    positions P-1 .. P+T-2. See Layout for the ways in; all are exact up to rounding. `lm_head`:
    a causal LM (its head may run on the needed positions only); false for a value model.
    """
    if layout.packed:
        return _packed_logits(model, seqs, layout, lm_head), seqs
    # sharing runs two forwards unless one response column is left (_padded_logits): keep two, so every
    # data-parallel rank runs the same number of forwards (fsdp2's per-layer collectives need it)
    seqs = trimmed(seqs, min_response=2 if layout.share_prompts else 1)
    return _padded_logits(model, seqs, layout.share_prompts), seqs


def _padded_logits(model, seqs: Sequences, share_prompts: bool) -> Tensor:
    """_response_logits on padded rows. With `share_prompts`, rows with the same prompt run its forward
    once (prefill_distinct) and only their responses separately."""
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
                 position_ids=positions[:, P:-1], **cache_kwargs(model, cache), use_cache=True).logits  # [N, T-1, ...]
    return torch.cat([last_prompt, rest], dim=1)


def response_log_probs(model, seqs: Sequences, temperature: float = 1.0, with_entropy: bool = False,
                       layout: Layout = PLAIN) -> tuple[Tensor, Tensor | None]:
    """log π(a_t | s_t) of each response token at `temperature` (and the entropy of π(.|s_t)).

    Returns ([N, T], [N, T] or None), zero on padding.
    """
    width = seqs.response_mask.shape[1]
    logits, seqs = _response_logits(model, seqs, layout)  # [N, t, V]
    logp_all = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    mask = seqs.response_mask
    lp = logp_all.gather(-1, seqs.response_ids.unsqueeze(-1)).squeeze(-1) * mask
    entropy = None
    if with_entropy:
        entropy = _repad(-(logp_all.exp() * logp_all).sum(-1) * mask, width)
    return _repad(lp, width), entropy


MicroBatches = Callable[[Sequences], list[Tensor]]  # seqs -> the row indices of each micro-batch


def fixed_micro_batches(size: int) -> MicroBatches:
    """Consecutive chunks of `size` rows."""
    return lambda seqs: [torch.arange(i, min(i + size, len(seqs.input_ids))) for i in range(0, len(seqs.input_ids), size)]


def _over_micro_batches(fn: Callable[[Sequences], Tensor], seqs: Sequences, micro_batches: MicroBatches | int) -> Tensor:
    """fn on each micro-batch, outputs back in row order; [N, T]."""
    parts = (fixed_micro_batches(micro_batches) if isinstance(micro_batches, int) else micro_batches)(seqs)
    if not parts:  # no rows (e.g. a data-parallel rank's empty share)
        return seqs.response_mask.new_zeros(0, seqs.response_mask.shape[1], dtype=torch.float32)
    out = torch.cat([fn(select(seqs, rows)) for rows in progress.counted(parts, "micro-batch")])
    order = torch.cat(parts)
    return out if torch.equal(order, torch.arange(len(order))) else out[torch.argsort(order)]


@torch.no_grad()
def batched_log_probs(model, seqs: Sequences, temperature: float, micro_batches: MicroBatches | int,
                      layout: Layout = PLAIN) -> Tensor:
    """response_log_probs over micro-batches (a size, or a function giving each one's rows), without
    gradients; [N, T]."""
    return _over_micro_batches(lambda part: response_log_probs(model, part, temperature, layout=layout)[0], seqs,
                               micro_batches)


@torch.no_grad()
def batched_log_probs_and_entropy(model, seqs: Sequences, temperature: float, micro_batches: MicroBatches | int,
                                  layout: Layout = PLAIN) -> Tensor:
    """batched_log_probs and the entropy of π(.|s_t) at `temperature`, both from the same forward's logits
    (no second pass); [N, 2, T]: [:, 0] the log-probs, [:, 1] the entropies, 0 on padding. One tensor so
    that row shards of it concatenate like the log-probs alone (distributed/group.py map_rows)."""
    def both(part: Sequences) -> Tensor:
        lp, entropy = response_log_probs(model, part, temperature, with_entropy=True, layout=layout)
        return torch.stack([lp, entropy], dim=1)  # [n, 2, T]
    if not len(seqs.input_ids):  # a data-parallel rank's empty share: [0, 2, T], so that it concatenates
        return seqs.response_mask.new_zeros(0, 2, seqs.response_mask.shape[1], dtype=torch.float32)
    return _over_micro_batches(both, seqs, micro_batches)


def response_values(model, seqs: Sequences, layout: Layout = PLAIN) -> Tensor:
    """V(s_t) of the state before each response token, from a scalar-head model; [N, T], 0 on padding.

    Same shift as the log-probs: the value read at position i is that of the prefix up to i,
    i.e. the state in which token i+1 is chosen.
    """
    out, used = _response_logits(model, seqs, layout, lm_head=False)
    return _repad(out[..., 0].float() * used.response_mask, seqs.response_mask.shape[1])  # [N, T]


@torch.no_grad()
def batched_values(model, seqs: Sequences, micro_batches: MicroBatches | int, layout: Layout = PLAIN) -> Tensor:
    """response_values over micro-batches, without gradients; [N, T]."""
    return _over_micro_batches(lambda part: response_values(model, part, layout), seqs, micro_batches)
