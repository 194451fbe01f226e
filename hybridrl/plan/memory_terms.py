"""Bytes of each kind of tensor a step holds: the formulas behind plan/memory.py's estimate.

Each function sizes one kind of tensor from the model's dimensions (ModelDims) and the tokens of one
forward (Segment), for HF's Llama-family decoder layer (Qwen2, Llama, Mistral: RMSNorm, rotary
attention with grouped K/V heads, SiLU-gated MLP) as models/forward.py, models/packing.py and
rollout/hf.py run it with torch's scaled_dot_product_attention ("sdpa", transformers' default) or
"eager" attention. The saved-tensor counts are held against torch.autograd.graph.saved_tensors_hooks
in tests/unit/plan/test_memory_terms.py. `act` is the width in bytes of what the matmuls output:
4 in fp32, 2 under bf16 autocast (models/precision.py) or with bf16 weights; RMSNorm computes in fp32
and log_softmax runs on fp32 logits (models/forward.py) whatever the compute dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FP32, BF16 = 4, 2  # bytes per element


@dataclass(frozen=True)
class ModelDims:
    """What the estimate needs of a HF causal LM folder (config.json and its safetensors)."""

    params: int  # every stored parameter (tied embeddings counted once, as stored)
    layer_params: int  # the largest decoder layer's: what FSDP2 gathers at a time in training
    root_params: int  # outside the decoder layers (embeddings, final norm, head): FSDP2's root group
    head_params: int  # lm_head.* when stored (untied); a value model replaces it by a 1-wide head
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @property
    def matmul_params(self) -> int:
        """Weights the decoder layers' projections and the LM head multiply by (q, k, v, o, gate, up, down
        of each layer, and the head: tied to the embedding or stored)."""
        attn = self.hidden * (2 * self.heads + 2 * self.kv_heads) * self.head_dim
        return self.layers * (attn + 3 * self.hidden * self.intermediate) + self.vocab * self.hidden


@dataclass(frozen=True)
class Segment:
    """The tokens of one forward call: `rows` sequences of `queries` positions each, every position
    attending to `keys` positions (its own row's plus those read from a KV cache)."""

    rows: int
    queries: int
    keys: int

    @property
    def tokens(self) -> int:
        return self.rows * self.queries


# ---- which tokens a micro-batch runs --------------------------------------------------------------------

def distinct_prompts(rows: int, n: int, contiguous: bool = True) -> int:
    """Distinct prompts among `rows` responses taken from groups of n (rows i*n .. i*n+n-1 share a prompt).
    Contiguous rows starting at a multiple of `rows` (fixed-size micro-batches; token budgets keep groups
    whole): rows / n when n divides rows, one prompt when rows divides n, else at most ceil(rows / n) + 1.
    Shuffled rows: up to one prompt per row."""
    if not contiguous:
        return rows
    if rows % n == 0:
        return max(1, rows // n)
    if n % rows == 0:
        return 1
    return min(rows, rows // n + 2)


def padded_segments(rows: int, prompts: int, prompt_len: int, response_len: int, share: bool) -> list[Segment]:
    """The forward calls of a pass over `rows` sequences padded to prompt_len + response_len tokens, from
    `prompts` distinct prompts (models/forward.py _padded_logits). Without sharing: one forward over whole
    rows. With share_prompt_prefix: each distinct prompt once, then every row's response but its last token
    against the prompt's cached keys."""
    s = prompt_len + response_len
    if not share:
        return [Segment(rows, s, s)]
    out = [Segment(prompts, prompt_len, prompt_len)]
    if response_len > 1:
        out.append(Segment(rows, response_len - 1, s - 1))
    return out


def packed_rows(rows: int, prompts: int, prompt_len: int, response_len: int, share: bool,
                width: int) -> tuple[int, int, int]:
    """(packed rows R, their length L, response columns K) of models/packing.py's pack for `rows` sequences of
    full length: units (a sequence, or with sharing a prompt followed by as many of its responses as fit the
    row width max(width, S)) placed first-fit, longest first, into rows of that width; L is the fullest row.
    K: the columns whose outputs are read (the head runs on those only), about the response share of a row."""
    s = prompt_len + response_len
    cap = max(width, s)
    if share:
        per_unit = max(1, (cap - prompt_len) // response_len)
        units = []
        for p in range(prompts):
            left = rows // prompts + (1 if p < rows % prompts else 0)
            while left > 0:
                k = min(per_unit, left)
                units.append(prompt_len + k * response_len)
                left -= k
    else:
        units = [s] * rows
    fill: list[int] = []
    for u in sorted(units, reverse=True):
        r = next((i for i, f in enumerate(fill) if f + u <= cap), None)
        if r is None:
            fill.append(u)
        else:
            fill[r] += u
    longest = max(fill)
    response_share = (max(units) - prompt_len) / max(units) if share else response_len / s
    return len(fill), longest, min(longest, math.ceil(longest * response_share) + 1)


# ---- training forward: what autograd saves ---------------------------------------------------------------

def layer_saved_bytes(d: ModelDims, seg: Segment, attention: str = "sdpa", act: int = FP32,
                      autocast: bool = False) -> int:
    """Bytes one decoder layer saves for backward over `seg`. Per query position (q of them, k keys; h hidden,
    a heads of size dh, I the MLP width):
      2 RMSNorms, fp32: input and x·rsqrt(mean x²) (2·h each), rsqrt (1 each)                  4·h + 2
      the projections' inputs: in fp32 the normed attention input (q, k, v share it) and o_proj's
      input (2·h); under autocast the bf16 copy each of q, k, v, gate, up casts, and o_proj's    5·h (bf16)
      attention: q and the output (q positions), k and v as the kernel reads them (k positions,
                 repeated to a heads under GQA)                                                  2·a·dh·(q + k)
        sdpa: the boolean padding/causal (or packing block) mask converted to an additive mask of the
              query's dtype in each layer (k per query) and the log-sum-exp (a per query, fp32). A batch
              without any mask (no padding, no cache, no packing) saves less: no mask, k and v unrepeated
        eager: the softmax probabilities (a·k per query)
      gated MLP: gate, silu(gate), up and their product                                          4·I
    RoPE saves its cos and sin once per forward (rotary_saved_bytes), not per layer."""
    q, k = seg.queries, seg.keys
    norms = FP32 * (4 * d.hidden + 2) * q
    inputs = BF16 * 5 * d.hidden * q if autocast else act * 2 * d.hidden * q
    attn = act * 2 * d.heads * d.head_dim * (q + k)
    scores = act * d.heads * q * k if attention == "eager" else act * q * k + FP32 * d.heads * q
    mlp = act * 4 * d.intermediate * q
    return seg.rows * (norms + inputs + attn + scores + mlp)


def rotary_saved_bytes(d: ModelDims, seg: Segment) -> int:
    """cos and sin of every position of every row, [rows, 1, q, head_dim] each, fp32, shared by all layers."""
    return FP32 * 2 * seg.rows * seg.queries * d.head_dim


def head_saved_bytes(d: ModelDims, segments: list[Segment], head_positions: int, responses: int, response_len: int,
                     lm_head: bool) -> int:
    """The final RMSNorm over every position (input and x·rsqrt: 2·h + 1 per position, fp32), the head's input
    at the `head_positions` it runs on (h each) and, over the response positions, the log-probs the loss reads:
    log_softmax's output and its exp (the entropy), [responses, T, V] each, fp32; a value head's output is
    [rows, positions, 1]."""
    positions = sum(s.tokens for s in segments)
    head = FP32 * 2 * responses * response_len * d.vocab if lm_head else FP32 * positions
    return FP32 * (2 * d.hidden + 1) * positions + FP32 * d.hidden * head_positions + head


def head_positions(segments: list[Segment], layout: str, rows: int, prompts: int, response_len: int) -> int:
    """Positions the LM head runs on: every position of padded rows (HF computes all, the response slice
    keeps them), each prompt's last position and the responses' with prompt sharing, the read columns of
    packed rows (K of each row: the segment's `keys` field is not it, so packed callers pass R·K)."""
    if layout == "padded":
        return sum(s.tokens for s in segments)
    return prompts + rows * (response_len - 1)


def saved_activation_bytes(d: ModelDims, segments: list[Segment], responses: int, response_len: int,
                           attention: str = "sdpa", lm_head: bool = True, checkpointing: bool = False,
                           act: int = FP32, autocast: bool = False, head_at: int | None = None) -> int:
    """Bytes autograd holds after the forward of one training micro-batch (Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models", §4.1, redone for HF's layer without
    dropout). `head_at`: the positions the head runs on (head_positions; default every position). With
    activation checkpointing (non-reentrant, one checkpoint per decoder layer, models/memory.py) each layer
    keeps only its input, the fp32 residual stream [rows, q, h], and RoPE's cos/sin are its inputs, not saved
    again; the backward recomputes one layer at a time, so one layer's full set comes back at its peak."""
    one_layer = sum(layer_saved_bytes(d, s, attention, act, autocast) for s in segments)
    if checkpointing:
        layers = d.layers * sum(FP32 * s.tokens * d.hidden for s in segments) + one_layer
    else:
        layers = d.layers * one_layer + sum(rotary_saved_bytes(d, s) for s in segments)
    at = sum(s.tokens for s in segments) if head_at is None else head_at
    return layers + head_saved_bytes(d, segments, at, responses, response_len, lm_head)


def autocast_weight_bytes(d: ModelDims) -> int:
    """bf16 autocast casts every weight a matmul reads to bf16 once per forward and keeps the copies for the
    backward (torch.autocast's weight-cast cache): 2 bytes per matmul parameter."""
    return BF16 * d.matmul_params


def logits_transient_bytes(d: ModelDims, responses: int, seq_len: int, response_len: int, layout: str,
                           packed_logits: int = 0) -> int:  # packed_logits: R·K head positions of packed rows
    """What a pass holds beside the saved activations after its head: the [responses, T, V] logits, the
    temperature-scaled fp32 copy log_softmax reads, and log_softmax's output (or, in training, the entropy's
    p·log p beside the saved log-probs), three [responses, T, V] fp32 tensors. `layout`:
      "shared": the logits are the concatenation of the prompt's last position and the responses';
      "padded": the model returns all S positions' logits, [responses, S, V], kept alive by the response slice;
      "packed": the head runs on the read columns only, `packed_logits` = R·K positions, gathered into
                [responses, T, V] (both alive at the gather)."""
    t = FP32 * responses * response_len * d.vocab
    if layout == "padded":
        return FP32 * responses * seq_len * d.vocab + 2 * t
    if layout == "packed":
        return max(3 * t, FP32 * packed_logits * d.vocab + t)
    return 3 * t


# ---- forwards without gradients, and generation -----------------------------------------------------------

def kv_cache_bytes(d: ModelDims, rows: int, positions: int, width: int = FP32) -> int:
    """K and V of every layer: 2 · layers · kv_heads · head_dim values per token."""
    return width * 2 * d.layers * d.kv_heads * d.head_dim * rows * positions


def layer_transient_bytes(d: ModelDims, seg: Segment, attention: str = "sdpa", act: int = FP32) -> int:
    """Live tensors of one decoder layer in a forward without gradients (earlier layers' are freed), per query:
    the layer's input, the residual, the normed copy and the output (4·h), plus the larger of
      attention: the q, k, v projections ((a + 2·kv)·dh), RoPE's products for q and k (2·(a + kv)·dh),
                 k and v repeated to a heads over the k keys (2·a·dh per key) and the output (a·dh); sdpa's
                 float mask (k per query), or eager's scores and probabilities (2·a·k)
      MLP: silu(gate), up and their product (3·I)."""
    q, k, a, dh = seg.queries, seg.keys, d.heads, d.head_dim
    mask = 2 * a * k if attention == "eager" else k
    attn = (a + 2 * d.kv_heads) * dh * q + 2 * (a + d.kv_heads) * dh * q + 2 * a * dh * k + a * dh * q + mask * q
    mlp = 3 * d.intermediate * q
    return act * seg.rows * (4 * d.hidden * q + max(attn, mlp))


def decode_weight_bytes(d: ModelDims, bf16: bool, packed: bool = False) -> int:
    """rollout/decode.py's LeanDecoder, built per generate call: in fp32 it concatenates each layer's q, k, v
    and its gate, up weights into one matrix each (new tensors: h·(a + 2·kv)·dh + 2·h·I per layer); in bf16
    (rollout.dtype=bfloat16) it holds a bf16 copy of every weight (tied embeddings once). Packed
    (rollout.pack_weights): every projection and the LM head in oneDNN's layout, new tensors that replace the
    concatenations or bf16 copies; the embedding lookup keeps its matrix, so a tied head is held twice."""
    tied_head = d.vocab * d.hidden if d.head_params == 0 else 0
    if bf16:
        return BF16 * (d.params + (tied_head if packed else 0))
    if packed:
        return FP32 * d.matmul_params
    per_layer = d.hidden * (d.heads + 2 * d.kv_heads) * d.head_dim + 2 * d.hidden * d.intermediate
    return FP32 * d.layers * per_layer


def sampling_bytes(d: ModelDims, rows: int, do_sample: bool) -> int:
    """One decode step's [rows, V] fp32 tensors: the logits and rollout/hf.py choose_tokens' log_softmax and,
    when sampling, the scaled copy, the softmax and its cumulative sum."""
    return FP32 * (5 if do_sample else 2) * rows * d.vocab
