"""The lean Llama-family decoder (rollout/decode.py) against the HuggingFace forward, and the hf
engine's two decode paths (lean and static-cache) against each other."""

import warnings

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from hybridrl.models.cache_api import cache_kwargs
from hybridrl.models.forward import position_ids_of
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.rollout import decode
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine


def small(kind: str, kv_heads: int = 4, **extra):
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=kv_heads, max_position_embeddings=64, tie_word_embeddings=False, **extra)
    torch.manual_seed(0)
    model = (Qwen2ForCausalLM(Qwen2Config(**common)) if kind == "qwen2" else LlamaForCausalLM(LlamaConfig(**common)))
    with torch.no_grad():  # non-zero biases, so a dropped q/k/v bias would show
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


@pytest.mark.parametrize("kind,kv_heads,extra", [("qwen2", 4, {}), ("qwen2", 2, {}), ("llama", 1, {}),
                                                  ("llama", 2, {"attention_bias": True})])
def test_lean_steps_equal_the_full_forward(kind, kv_heads, extra):
    model = small(kind, kv_heads, **extra)
    assert decode.supports(model)
    N, P, T = 4, 6, 4
    ids = torch.randint(0, 64, (N, P + T))
    mask = torch.ones(N, P + T, dtype=torch.long)
    mask[0, :2] = mask[1, :1] = 0  # left padding
    mask[2, P + 1] = 0  # a row whose response ended (its later slots masked)
    positions = position_ids_of(mask)
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        cache = DynamicCache()
        model(input_ids=ids[:, :P], attention_mask=mask[:, :P], position_ids=positions[:, :P], **cache_kwargs(model, cache),
              use_cache=True)
    lean = decode.LeanDecoder(model, N, P + T)
    for i, layer in enumerate(cache.layers):
        lean.fill(i, layer.keys, layer.values)
    for t in range(T):
        logits = lean.step(ids[:, P + t], positions[:, P + t], P + t, mask[:, :P + t + 1].bool())
        live = mask[:, P + t].bool()  # a masked slot's own output is never used
        assert torch.allclose(logits[live], full[live, P + t], atol=1e-5), t


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_single_query_attention_equals_sdpa(kv_heads):
    import torch.nn.functional as F

    model = small("llama", kv_heads)
    N, S, H, D = 3, 7, 4, 8
    lean = decode.LeanDecoder(model, N, S + 2)  # a longer cache than S: only positions 0..S-1 may be read
    torch.manual_seed(1)
    for i in range(2):
        lean.fill(i, torch.randn(N, kv_heads, S + 2, 8), torch.randn(N, kv_heads, S + 2, 8))
    q = torch.randn(N, H, D)
    keep = torch.ones(N, S, dtype=torch.bool)
    keep[0, :3] = keep[2, -1] = False
    bias = torch.zeros(N, 1, 1, S).masked_fill_(~keep[:, None, None], float("-inf"))
    ours = lean._attend(q, 1, S, bias.expand(N, kv_heads, 1, S).reshape(N * kv_heads, 1, S))
    ref = F.scaled_dot_product_attention(q[:, :, None], lean.keys[1][:, :, :S], lean.values[1][:, :, :S],
                                         attn_mask=bias, enable_gqa=kv_heads != H)
    assert torch.allclose(ours, ref.reshape(N, H * D), atol=1e-6)


def test_supports_only_plain_llama_family():
    assert decode.supports(small("llama"))
    rope = small("llama")
    rope.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    assert not decode.supports(rope)
    gelu = small("qwen2")
    gelu.config.hidden_act = "gelu"
    assert not decode.supports(gelu)
    from transformers import GPT2Config, GPT2LMHeadModel

    assert not decode.supports(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64)))


@pytest.fixture(scope="module")
def parts(random_model_dir):
    return load_tokenizer(random_model_dir), load_causal_lm(random_model_dir)


def _prompts(tok, texts, n):
    rows = [tok(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False),
                add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(r)) + r for r in rows]).repeat_interleave(n, 0)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows]).repeat_interleave(n, 0)
    return ids, mask


@pytest.mark.parametrize("sampling", [SamplingParams(max_new_tokens=7, temperature=0.9),
                                      SamplingParams(max_new_tokens=5, do_sample=False)])
def test_engine_paths_sample_the_same_tokens(parts, sampling):
    tok, model = parts
    ids, mask = _prompts(tok, ["What is 1+2?", "What is 123+456?"], n=3)
    out = {}
    for lean in (False, True):
        for share in (False, True):
            engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id, seed=3, share_prompts=share,
                                     lean_decode=lean)
            out[lean, share] = engine.generate(ids, mask, sampling, torch.arange(len(ids)))
    ref = out[False, False]
    for g in out.values():
        assert torch.equal(g.response_ids, ref.response_ids) and torch.equal(g.response_mask, ref.response_mask)
        assert torch.allclose(g.log_probs, ref.log_probs, atol=1e-5)


def test_engine_and_log_prob_paths_use_no_deprecated_transformers_api(parts):
    # transformers announces an API's removal with FutureWarning/DeprecationWarning; every run would print it
    from hybridrl.batch import Sequences
    from hybridrl.models.forward import Layout, response_log_probs

    tok, model = parts
    ids, mask = _prompts(tok, ["What is 1+2?"], n=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        for lean in (False, True):
            for share in (False, True):
                engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id, share_prompts=share,
                                         lean_decode=lean)
                out = engine.generate(ids, mask, SamplingParams(max_new_tokens=4), torch.arange(len(ids)))
                seqs = Sequences(torch.cat([ids, out.response_ids], 1), torch.cat([mask, out.response_mask], 1),
                                 out.response_mask)
                response_log_probs(model, seqs, layout=Layout(share, packed=lean))  # packing too


def test_ignore_eos_generates_every_token():
    model = small("llama")
    with torch.no_grad():
        model.lm_head.weight[5] = 0
        model.lm_head.bias = None
        model.model.norm.weight.fill_(1.0)
        model.lm_head.weight[5] = model.lm_head.weight.abs().sum(0) * 10  # token 5 dominates every step
    ids, mask = torch.randint(6, 64, (3, 4)), torch.ones(3, 4, dtype=torch.long)
    engine = HFRolloutEngine(model, [5], pad_token_id=0)
    sampling = dict(max_new_tokens=6, do_sample=False)
    stopped = engine.generate(ids, mask, SamplingParams(**sampling), torch.arange(3))
    assert stopped.response_ids.tolist() == [[5]] * 3  # EOS first: every response ends at once
    full = engine.generate(ids, mask, SamplingParams(**sampling, ignore_eos=True), torch.arange(3))
    assert full.response_mask.tolist() == [[1] * 6] * 3  # generation went on after the EOS
    assert (full.response_ids[:, 0] == 5).all() and torch.equal(full.log_probs[:, 0], stopped.log_probs[:, 0])


def lean_logits(model, ids, mask, P, T, **kwargs) -> list[torch.Tensor]:
    """Each decode step's logits of a LeanDecoder over ids [N, P + T] (the prompt's cache from the module)."""
    positions = position_ids_of(mask)
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=ids[:, :P], attention_mask=mask[:, :P], position_ids=positions[:, :P], **cache_kwargs(model, cache),
              use_cache=True)
    lean = decode.LeanDecoder(model, len(ids), P + T, **kwargs)
    for i, layer in enumerate(cache.layers):
        lean.fill(i, layer.keys, layer.values)
    out = [lean.step(ids[:, P + t], positions[:, P + t], P + t, mask[:, :P + t + 1].bool()) for t in range(T)]
    return out, lean


packing = pytest.mark.skipif(not decode.can_pack("cpu"), reason="oneDNN's prepacked linear is x86 CPU only")
packing_bf16 = pytest.mark.skipif(not decode.can_pack("cpu", torch.bfloat16), reason="oneDNN reorders bf16 weights "
                                  "on x86 CPUs with avx512bw+vl+dq or avx_ne_convert")


def test_bf16_weights_are_packed_only_on_cpus_that_onednn_reorders_bf16_on():
    """torch refuses oneDNN's bf16 reorder on an AVX2-only CPU ('bf16 path needs the cpu support avx_ne_convert or
    avx512bw, avx512vl and avx512dq'); the flags are /proc/cpuinfo's names."""
    avx512 = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
    assert decode.can_reorder_bf16(avx512) and decode.can_reorder_bf16({"avx2", "avx_ne_convert"})
    assert not decode.can_reorder_bf16({"avx2", "fma", "f16c"})  # an AVX2-only EPYC
    assert not decode.can_reorder_bf16(avx512 - {"avx512dq"}) and not decode.can_reorder_bf16(None)


def packing_model(extra: dict):
    """(a 2-layer Llama, ids [4, 11], mask with a left-padded row): prompts of 5, 6 decode steps."""
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, **extra)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**common)).eval()
    N, P, T = 4, 5, 6
    ids = torch.randint(0, 64, (N, P + T))
    mask = torch.ones(N, P + T, dtype=torch.long)
    mask[0, :2] = 0
    return model, ids, mask


EXTRAS = [{}, {"attention_bias": True, "tie_word_embeddings": True}]


@packing_bf16
@pytest.mark.parametrize("extra", EXTRAS)
def test_packed_bf16_weights_give_the_plain_decoders_logits(extra):
    """oneDNN runs F.linear and addmm too, so packing changes no bit, also when it happens mid-generation."""
    model, ids, mask = packing_model(extra)
    P, T = 5, 6
    plain, lean = lean_logits(model, ids, mask, P, T, dtype=torch.bfloat16)
    assert not lean.packed
    for after in (0, 3):
        packed, lean = lean_logits(model, ids, mask, P, T, dtype=torch.bfloat16, pack_after=after)
        assert lean.packed and lean.steps == T
        assert all(torch.equal(a, b) for a, b in zip(plain, packed)), after
        assert lean.lm_head.is_mkldnn and not lean.embed.is_mkldnn  # a tied head: a packed copy, the lookup plain
        assert all(layer[i].is_mkldnn for layer in lean.layers for i in (1, 3, 6, 7))  # qkv, o, gate|up, down


@packing
@pytest.mark.parametrize("extra", EXTRAS)
def test_packed_fp32_weights_give_the_plain_decoders_logits_to_float_rounding(extra):
    """The packed matmul is oneDNN's against MKL's sgemm, equal to float rounding."""
    model, ids, mask = packing_model(extra)
    P, T = 5, 6
    plain32, _ = lean_logits(model, ids, mask, P, T)
    packed32, lean = lean_logits(model, ids, mask, P, T, pack_after=2)
    assert lean.packed
    assert all(torch.allclose(a, b, rtol=0, atol=1e-5) for a, b in zip(plain32, packed32))
    assert all(torch.equal(a, b) for a, b in zip(plain32[:2], packed32[:2]))  # before the switch: the plain path


def decoders_made(monkeypatch) -> list:
    """The LeanDecoders the engine builds from here on, in order (a spy in place of the class)."""
    made = []
    real = decode.LeanDecoder

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(decode, "LeanDecoder", spy)
    return made


@packing
def test_engine_packs_only_past_pack_after_and_only_when_asked(monkeypatch):
    from hybridrl.rollout import hf

    model = small("llama", 2)
    made = decoders_made(monkeypatch)
    ids = torch.randint(0, 64, (2, 4))
    mask = torch.ones_like(ids)
    for pack, new_tokens, packed in [(True, hf.PACK_AFTER + 2, True), (True, hf.PACK_AFTER - 1, False),
                                     (False, hf.PACK_AFTER + 2, False)]:
        engine = HFRolloutEngine(model, [63], 0, pack_weights=pack)
        engine.generate_keyed(ids, mask, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True), torch.arange(2))
        assert made[-1].packed is packed, (pack, new_tokens)


@packing
def test_a_bf16_engine_packs_where_onednn_reorders_bf16_and_generates_the_same_either_way(monkeypatch):
    """rollout.dtype=bfloat16 with pack_weights (the default): packed where can_pack says bf16 reorders, plain
    elsewhere. On an AVX2-only CPU this generation crashed at its PACK_AFTER-th step in oneDNN's reorder."""
    from hybridrl.models.precision import Precision
    from hybridrl.rollout import hf

    model = small("llama", 2)
    made = decoders_made(monkeypatch)
    ids = torch.randint(0, 64, (2, 4))
    sampling = SamplingParams(max_new_tokens=hf.PACK_AFTER + 3, ignore_eos=True, do_sample=False)
    out = {}
    for pack in (False, True):
        engine = HFRolloutEngine(model, [63], 0, pack_weights=pack, precision=Precision.of("bf16"))
        out[pack] = engine.generate_keyed(ids, torch.ones_like(ids), sampling, torch.arange(2))
        assert made[-1].packed is (pack and decode.can_pack("cpu", torch.bfloat16))
    assert torch.equal(out[True].response_ids, out[False].response_ids)
    assert torch.equal(out[True].log_probs, out[False].log_probs)  # oneDNN's bf16 linear either way: bit-equal


def test_bf16_weights_stay_plain_where_onednn_is_capped_below_bf16(monkeypatch):
    """An AVX-512 CPU emulating an AVX2-only one (ONEDNN_MAX_CPU_ISA=AVX2, as bench/speed.py runs it): its flags say
    oneDNN reorders bf16, but the capped oneDNN does not; the packed bf16 decoder failed there."""
    import hybridrl.plan.precision_auto as precision_auto
    from hybridrl.rollout.decode import can_pack

    if not can_pack("cpu"):
        pytest.skip("no oneDNN prepacked linear in this torch build")
    monkeypatch.setattr(precision_auto, "cpu_flags", lambda: {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2"})
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    assert can_pack("cpu", torch.bfloat16)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not can_pack("cpu", torch.bfloat16) and can_pack("cpu", torch.float32)
