"""plan/memory_terms.py's formulas held against the tensors the code really makes: what autograd saves in a
training forward (saved_tensors_hooks) in every layout (padded, prompt sharing, packing), with activation
checkpointing and under bf16 autocast; the packed row counts against models/packing.pack; the token-budget
micro-batch size against batching.py; the decoder's weights and KV cache against rollout/decode.py."""

from __future__ import annotations

import contextlib

import pytest
import torch

from hybridrl.batch import Sequences
from hybridrl.plan.levers import MicroBatching
from hybridrl.plan.memory import read_model_dims
from hybridrl.plan.memory_phases import micro_rows
from hybridrl.plan.memory_terms import (
    FP32,
    Segment,
    autocast_weight_bytes,
    decode_weight_bytes,
    distinct_prompts,
    head_positions,
    kv_cache_bytes,
    layer_saved_bytes,
    packed_rows,
    padded_segments,
    saved_activation_bytes,
)
from hybridrl.models.forward import Layout, response_log_probs
from hybridrl.models.memory import disable_checkpointing, enable_checkpointing
from saved_activations import SavedActivations

P, T, N, GROUP = 24, 8, 8, 4  # prompt and response lengths, responses in the micro-batch, responses per prompt


@pytest.fixture(scope="module")
def gqa_model(tmp_path_factory):
    """A random Qwen2 with grouped K/V heads (4 heads of 16, 2 KV heads), 2 layers, MLP 96, vocab 320, tied head,
    saved so that read_model_dims sizes it as the estimate does."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=320, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=96, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    out = tmp_path_factory.mktemp("gqa")
    model.save_pretrained(out)
    return model.train(), read_model_dims(str(out))


def full_length_batch(prompts: int, per_prompt: int, vocab: int, padded: bool = True) -> Sequences:
    """`prompts` distinct prompts of P tokens, `per_prompt` responses of T tokens each: every sequence full length
    (the estimate's assumption), so the formulas' token counts are exact. `padded`: the first prompt's first
    token is left padding (the padded layouts' shapes stay the same), so that attention takes a mask, as in
    any batch of prompts of several lengths."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (prompts, P), generator=g).repeat_interleave(per_prompt, 0)
    ids = torch.cat([ids, torch.randint(3, vocab, (prompts * per_prompt, T), generator=g)], 1)
    mask = torch.ones_like(ids)
    if padded:
        mask[:per_prompt, 0] = 0
    return Sequences(ids, mask, torch.ones(len(ids), T, dtype=torch.long))


def saved_bytes(model, seqs: Sequences, layout: Layout, autocast: bool = False) -> int:
    """Bytes of the distinct non-parameter float storages autograd saves in one policy-loss forward."""
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with SavedActivations(model) as saved, cast:
        lp, entropy = response_log_probs(model, seqs, with_entropy=True, layout=layout)
    (lp.sum() + entropy.sum()).backward()
    model.zero_grad(set_to_none=True)
    return saved.bytes


def estimate(d, layout: Layout, **kw) -> int:
    prompts = N // GROUP if layout.share_prompts else N
    if layout.packed:
        r, length, k = packed_rows(N, prompts, P, T, layout.share_prompts, layout.pack_width)
        segments, at = [Segment(r, length, length)], r * k
    else:
        segments = padded_segments(N, prompts, P, T, layout.share_prompts)
        at = head_positions(segments, "shared" if layout.share_prompts else "padded", N, prompts, T)
    return saved_activation_bytes(d, segments, N, T, head_at=at, **kw)


@pytest.mark.parametrize("layout", [Layout(), Layout(share_prompts=True), Layout(packed=True, pack_width=64),
                                    Layout(share_prompts=True, packed=True, pack_width=64)],
                         ids=["padded", "shared", "packed", "packed-shared"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_saved_activations_equal_what_autograd_saves(gqa_model, layout, attention):
    model, d = gqa_model
    model.config._attn_implementation = attention
    measured = saved_bytes(model, full_length_batch(N // GROUP, GROUP, d.vocab, padded=not layout.packed), layout)
    # exact but for the packed head's input, whose read columns K packed_rows bounds from above
    assert estimate(d, layout, attention=attention) == pytest.approx(measured, rel=0.02)
    model.config._attn_implementation = "sdpa"


def test_checkpointing_saves_only_each_layers_input_and_the_head(gqa_model):
    model, d = gqa_model
    layout = Layout(share_prompts=True, packed=True, pack_width=64)  # checkpointing's layout: no KV cache
    seqs = full_length_batch(N // GROUP, GROUP, d.vocab, padded=False)
    enable_checkpointing(model)
    try:
        measured = saved_bytes(model, seqs, layout)
    finally:
        disable_checkpointing(model)
    r, length, _ = packed_rows(N, N // GROUP, P, T, True, 64)
    seg = Segment(r, length, length)
    full = estimate(d, layout)
    checkpointed = estimate(d, layout, checkpointing=True)
    # the forward keeps 2 layers' fp32 inputs [r, L, h] (rotary cos/sin are inputs too); the backward's one
    # recomputed layer comes on top at its peak
    forward_only = checkpointed - layer_saved_bytes(d, seg)
    assert forward_only == pytest.approx(measured, rel=0.02)
    # what checkpointing drops: every layer's full set and RoPE's cos/sin, for the layers' fp32 inputs
    assert full - forward_only == d.layers * (layer_saved_bytes(d, seg) - FP32 * seg.tokens * d.hidden) + \
        2 * FP32 * seg.tokens * d.head_dim


def test_bf16_autocast_halves_what_it_computes_in_bf16(gqa_model):
    model, d = gqa_model
    layout = Layout(share_prompts=True)
    seqs = full_length_batch(N // GROUP, GROUP, d.vocab)
    measured = saved_bytes(model, seqs, layout, autocast=True)
    bf16 = estimate(d, layout, act=2, autocast=True) + autocast_weight_bytes(d)  # + the weights' bf16 casts
    assert bf16 == pytest.approx(measured, rel=0.02)
    # per query and layer, fp32 saves 4 bytes of each matmul output; autocast 2, plus bf16 copies of the
    # projections' inputs (5·h instead of the 2·h fp32 ones); the norms' 4·h + 2 stay fp32
    seg = padded_segments(N, N // GROUP, P, T, True)[1]
    outputs = 2 * d.heads * d.head_dim * (seg.queries + seg.keys) + seg.queries * seg.keys + \
        4 * d.intermediate * seg.queries
    halved = layer_saved_bytes(d, seg) - layer_saved_bytes(d, seg, act=2, autocast=True)
    assert halved == seg.rows * (2 * outputs + FP32 * 2 * d.hidden * seg.queries - 2 * 5 * d.hidden * seg.queries)


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("width", [0, 64, 100])
def test_packed_rows_equal_packing_of_full_length_sequences(share, width):
    from hybridrl.models.packing import pack

    prompts, per = 3, 4
    seqs = full_length_batch(prompts, per, 300, padded=False)
    packed = pack(seqs, share, width)
    rows, length, kept = packed_rows(prompts * per, prompts, P, T, share, width)
    assert (rows, length) == tuple(packed.input_ids.shape)
    # read columns: an upper bound of the head's positions, never under it
    assert len(packed.keep_cols) <= kept + 1


def test_distinct_prompts_of_contiguous_micro_batches():
    # groups of 4: 8 rows hold 2 prompts, 2 rows half of one, 6 rows straddle at most 3 (e.g. rows 6..11)
    assert [distinct_prompts(b, 4) for b in (8, 2, 6, 1)] == [2, 1, 3, 1]
    assert distinct_prompts(6, 4, contiguous=False) == 6


def test_token_budget_micro_batch_size_matches_batching():
    from hybridrl.batching import token_budget_bins

    s = P + T
    for rows, budget in [(16, 128), (16, 100), (10, 1000), (7, 64)]:
        bins = token_budget_bins([s] * rows, budget)
        assert micro_rows(MicroBatching(4, budget), rows, s) == max(len(b) for b in bins)
    assert micro_rows(MicroBatching(4), 16, s) == 4 and micro_rows(MicroBatching(64), 16, s) == 16


@pytest.mark.parametrize("bf16", [False, True])
def test_decoder_weights_and_cache_equal_the_lean_decoders(gqa_model, bf16):
    from hybridrl.rollout.decode import LeanDecoder

    model, d = gqa_model
    lean = LeanDecoder(model, 3, P + T, torch.bfloat16 if bf16 else None)
    for i in range(d.layers):
        shape = (3, d.kv_heads, P, d.head_dim)
        lean.fill(i, torch.zeros(shape, dtype=lean.embed.dtype), torch.zeros(shape, dtype=lean.embed.dtype))
    cache = sum(t.nbytes for t in lean.keys + lean.values)
    assert cache == kv_cache_bytes(d, 3, P + T, 4)  # fp32 whatever the weights' dtype
    # fp32: the fused q|k|v and gate|up matrices are new tensors, the rest are the module's own weights
    own = {p.untyped_storage().data_ptr() for p in model.parameters()}
    tensors = [lean.embed, lean.norm, lean.lm_head, *[t for layer in lean.layers for t in layer if t is not None]]
    new = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors
           if t.untyped_storage().data_ptr() not in own}
    # (the fused q|k|v bias, 512 bytes a layer here, is not counted)
    assert sum(new.values()) == pytest.approx(decode_weight_bytes(d, bf16), rel=0.01)


@pytest.mark.parametrize("bf16", [False, True])
def test_packed_decoder_weights_equal_the_estimate(gqa_model, bf16):
    """rollout.pack_weights: oneDNN-layout copies (opaque tensors: numel x element size) of every projection and
    the head, in place of the plain decoder's concatenations or bf16 copies; the tied head is held twice."""
    from hybridrl.rollout.decode import LeanDecoder, can_pack

    if not can_pack("cpu", torch.bfloat16 if bf16 else torch.float32):
        pytest.skip("oneDNN's prepacked linear is x86 CPU only; bf16 needs avx512bw+vl+dq or avx_ne_convert")
    model, d = gqa_model
    lean = LeanDecoder(model, 3, P + T, torch.bfloat16 if bf16 else None, pack_after=0)
    own = {p.untyped_storage().data_ptr() for p in model.parameters()}
    packed = [lean.lm_head, *[t for layer in lean.layers for t in layer if t is not None and t.is_mkldnn]]
    plain = [t for t in [lean.embed, lean.norm, *[t for layer in lean.layers for t in layer if t is not None]]
             if not t.is_mkldnn and t.untyped_storage().data_ptr() not in own]
    size = sum(t.numel() * t.element_size() for t in packed) + sum(t.nbytes for t in plain)
    if bf16:  # the norms' and biases' small bf16 copies are in d.params; the fp32 path leaves them the module's
        assert size == pytest.approx(decode_weight_bytes(d, bf16, packed=True), rel=0.01)
    else:
        assert size - sum(t.nbytes for t in plain) == decode_weight_bytes(d, bf16, packed=True)
    assert decode_weight_bytes(d, bf16, packed=True) > decode_weight_bytes(d, bf16)  # the tied head twice (fp32: more)
