"""rollout.dtype=bfloat16 with the hf engine: the lean decoder holds bf16 weights and KV cache, and
generation stays close to fp32's.

bf16 is not fp32: on the bundled tiny-arith model, greedy answers to 64 addition prompts are the
same as fp32's for 62 of 64 (lean decoder) and 61 of 64 (static cache), the rest differ where two
tokens' logits are within bf16's rounding; the tests ask for at least 56 of 64 (7/8). The rollout
log-probs of bf16 samples lie within 0.03 nats of the fp32 trainer's (measured 0.026 and 0.020);
that gap is what `training/rollout_probs_diff_max` reports and `algorithm.rollout_correction` weighs.
"""

from __future__ import annotations

import pytest
import torch

from hybridrl.batch import Sequences
from hybridrl.models.forward import response_log_probs
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.models.precision import Precision
from hybridrl.rollout import decode
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from test_decode import _prompts, small

BF16 = Precision.of("bf16")


def fill_zeros(lean: decode.LeanDecoder) -> None:
    """An empty prompt cache in every layer (the decoder allocates a layer's cache as it is filled)."""
    N, K, _, D = lean.shape
    for layer in range(len(lean.layers)):
        lean.fill(layer, torch.zeros(N, K, 0, D), torch.zeros(N, K, 0, D))


def test_lean_decoder_in_bf16_reads_bf16_weights_and_keeps_the_logits():
    model = small("qwen2")
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    N, P = 3, 5
    ids, mask = torch.randint(0, 64, (N, P + 1)), torch.ones(N, P + 1, dtype=torch.bool)
    out = {}
    for dtype in (None, torch.bfloat16):
        lean = decode.LeanDecoder(model, N, P + 1, dtype)
        fill_zeros(lean)
        out[dtype] = lean.step(ids[:, P], torch.full((N,), P), P, mask)  # an empty prompt cache: attends to itself
    lean = decode.LeanDecoder(model, N, P + 1, torch.bfloat16)
    fill_zeros(lean)
    weights = [lean.embed, lean.norm, *[t for layer in lean.layers for t in layer if t is not None]]
    assert {t.dtype for t in weights} == {torch.bfloat16}
    assert {t.dtype for t in lean.keys + lean.values} == {torch.float32}  # attention in fp32 (decode.py)
    assert lean.lm_head is lean.embed  # tied weights: one bf16 copy
    assert out[torch.bfloat16].dtype == torch.bfloat16 and out[None].dtype == torch.float32
    assert (out[torch.bfloat16].float() - out[None]).abs().max() < 0.05 * out[None].abs().max()


def test_bf16_decode_step_runs_bf16_projections_and_fp32_attention():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):  # (op name, dtypes of its tensor arguments) of every aten op run
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor)}
            self.ops.append((func.overloadpacket.__name__, dtypes))
            return func(*args, **(kwargs or {}))

    model = small("qwen2", kv_heads=2)
    N, P = 3, 5
    runs = {}
    for kv_dtype in (torch.float32, None):
        lean = decode.LeanDecoder(model, N, P + 1, torch.bfloat16, kv_dtype=kv_dtype)
        fill_zeros(lean)
        with torch.autocast("cpu", dtype=torch.bfloat16), Seen() as seen:  # as the engine runs it
            lean.step(torch.tensor([1, 2, 3]), torch.full((N,), P), P, torch.ones(N, P + 1, dtype=torch.bool))
        runs[kv_dtype] = {}
        for name, dtypes in seen.ops:
            runs[kv_dtype].setdefault(name, set()).update(dtypes)
    fp32_kv, bf16_kv = runs[torch.float32], runs[None]
    assert fp32_kv["addmm"] == {torch.bfloat16} and fp32_kv["mm"] == {torch.bfloat16}  # projections, MLP, LM head
    assert fp32_kv["baddbmm"] == {torch.float32} and fp32_kv["bmm"] == {torch.float32}  # q K^T and softmax V
    assert bf16_kv["baddbmm"] == {torch.bfloat16}  # kv_dtype=None: everything in the weights' dtype
    assert not any("scaled_dot_product" in name for name in fp32_kv)


@pytest.fixture(scope="module")
def arith():
    tok, model = load_tokenizer("tiny-arith"), load_causal_lm("tiny-arith")
    g = torch.Generator().manual_seed(0)
    ids, mask = _prompts(tok, [f"What is {a}+{b}?" for a, b in torch.randint(0, 100, (64, 2), generator=g).tolist()], 1)
    return tok, model, ids, mask


@pytest.mark.parametrize("lean", [True, False])
def test_bf16_greedy_answers_mostly_equal_fp32s(arith, lean):
    tok, model, ids, mask = arith
    greedy = SamplingParams(max_new_tokens=8, do_sample=False)
    out = {name: HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id, lean_decode=lean,
                                 precision=Precision.of(name)).generate(ids, mask, greedy, torch.arange(len(ids)))
           for name in ("fp32", "bf16")}
    a, b = out["fp32"], out["bf16"]
    width = min(a.response_ids.shape[1], b.response_ids.shape[1])
    same = (a.response_ids[:, :width] == b.response_ids[:, :width]).all(1)
    assert 56 <= int(same.sum()) < 64  # mostly equal; not all: bf16 really decoded
    seqs = Sequences(torch.cat([ids, b.response_ids], 1), torch.cat([mask, b.response_mask], 1), b.response_mask)
    with torch.no_grad():
        trainer, _ = response_log_probs(model, seqs)  # the fp32 trainer's log-probs of the bf16 samples
    assert b.log_probs.dtype == torch.float32
    assert (trainer - b.log_probs).abs().max() < 0.03
    assert all(p.dtype == torch.float32 for p in model.parameters())  # generation never touched the masters
