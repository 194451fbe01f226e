"""Lean decode steps for Llama-family causal LMs (Qwen2, Llama, Mistral): one new token per row
against a preallocated KV cache, with the q/k/v and gate/up projections each fused into one
matmul.

Why: at rollout batch sizes a decode step of a small model is a few dozen small matmuls, and
the HuggingFace module's per-call machinery (mask building, cache classes, output capture)
costs as much as the arithmetic on a CPU. The math is the module's own, read from its weights
at construction (so a decoder is built per generate call, after every update):
RMSNorm (Zhang & Sennrich 2019), rotary embeddings (Su et al. 2021) from the module's own
rotary layer, grouped-query attention (Ainslie et al. 2023), SwiGLU MLP (Shazeer 2020).
The prompt's prefill stays with the HuggingFace forward; its keys and values are copied in.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hybridrl.models.families import FAMILY


# oneDNN reorders a bf16 weight only on a CPU with one of these sets (torch: "bf16 path needs the cpu support
# avx_ne_convert or avx512bw, avx512vl and avx512dq"): an AVX2-only CPU (an AMD EPYC, 2026-12-07) refused it, and a
# bf16 rollout crashed at its 8th decode step
BF16_REORDER_FLAGS = (frozenset({"avx_ne_convert"}), frozenset({"avx512bw", "avx512vl", "avx512dq"}))


def can_pack(device: torch.device | str, dtype: torch.dtype = torch.float32) -> bool:
    """Whether oneDNN's prepacked linear (the ops torch.compile's CPU freezing pass emits) takes weights of `dtype`
    here: an x86 CPU build of torch with oneDNN, and for bf16 a CPU that oneDNN reorders bf16 on
    (can_reorder_bf16). Elsewhere (aarch64's ACL build, a GPU, bf16 on an AVX2-only CPU) the decoder keeps plain
    weights."""
    import platform

    from hybridrl.plan.precision_auto import ISA_CAPS_BELOW_BF16, cpu_flags, onednn_cap_setting

    onednn = (torch.device(device).type == "cpu" and platform.machine().lower() in ("x86_64", "amd64")
              and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
              and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    # ONEDNN_MAX_CPU_ISA below bf16 (an AVX2-only CPU emulated on an AVX-512 one): oneDNN then works as the capped
    # CPU, whatever the flags say, so bf16 weights stay plain (keeping them plain is only slower, never wrong)
    cap = onednn_cap_setting()
    bf16_ok = can_reorder_bf16(cpu_flags()) and (cap is None or cap[1].upper() not in ISA_CAPS_BELOW_BF16)
    return onednn and (dtype != torch.bfloat16 or bf16_ok)


def can_reorder_bf16(flags: set[str] | None) -> bool:
    """The CPU flags (/proc/cpuinfo; None: unknown, so no) include one of BF16_REORDER_FLAGS."""
    return bool(flags) and any(need <= flags for need in BF16_REORDER_FLAGS)


def unwrapped(module):
    """The HF model inside a peft wrapper (LoRA), else `module` itself."""
    return module.get_base_model() if hasattr(module, "get_base_model") else module


def supports(module) -> bool:
    """A plain Llama-family decoder: full attention, default rotary, SiLU MLP, no extra norms. LoRA
    adapters are read merged into the projections they adapt (models/lora.effective_weight); on the
    embeddings or the LM head they are not, so such a model takes the module's own forward."""
    module = unwrapped(module)
    if hasattr(module.get_input_embeddings(), "base_layer") or hasattr(module.get_output_embeddings(), "base_layer"):
        return False
    c = getattr(module, "config", None)
    if c is None or c.model_type not in FAMILY or getattr(c, "hidden_act", None) != "silu":
        return False
    rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    if rope.get("rope_type", "default") != "default":
        return False
    if getattr(c, "use_sliding_window", False) or getattr(c, "sliding_window", None) and c.model_type == "mistral":
        return False
    layer = module.model.layers[0]
    return getattr(layer.mlp, "down_proj", None) is not None and not getattr(c, "mlp_bias", False)


class LeanDecoder:
    """Weights of `module` arranged for decode steps, and the KV cache for [N, max_len] positions."""

    def __init__(self, module, batch: int, max_len: int, dtype: torch.dtype | None = None,
                 kv_dtype: torch.dtype | None = torch.float32, pack_after: int | None = None):
        """`dtype`: the weights in it (rollout.dtype=bfloat16: every decode step reads half the bytes, the norms
        still reduce in fp32); None: the module's own. `kv_dtype`: the rotary embedding, KV cache and attention
        arithmetic in it; None: the weights' dtype. fp32 by default: a one-query attention step is a few
        thousand FLOPs a head, and torch's bf16 CPU kernels for it (SDPA's flash kernel, bf16 bmm) ran 3-9x
        slower than fp32 ones on AVX512-BF16 (bench/decode_bf16.py), while fp32 scores and rotary are what
        the trainer's autocast forward computes before it rounds q, k, v to bf16.
        `pack_after` (needs can_pack for the weights' dtype; None: never): after that many steps, every projection
        and the LM head are reordered once into oneDNN's blocked layout and run by its prepacked linear, whose
        matmul reads that layout instead of repacking the weight at every call (the residual adds stay fused, as
        addmm's). At decode's 32 rows, 2 threads, AVX512-BF16: 15-22 % more bf16 GFLOP/s per projection with results
        bit-equal to F.linear's and addmm's (oneDNN runs those too), and 30-40 % more in fp32 than MKL's sgemm,
        whose results it matches to float rounding (~3e-6 relative). Reordering costs about what 4-5 steps save,
        hence after some steps: a short generation (EOS after a few tokens) never pays for it
        (bench/decode_bf16.py)."""
        from hybridrl.models.lora import effective_weight  # W, or W + s B A under a LoRA adapter

        def w(t):  # a weight (a projection module's effective one) in the decode dtype
            t = effective_weight(t) if isinstance(t, torch.nn.Module) else t
            return t if t is None or dtype is None else t.to(dtype)

        module = unwrapped(module)
        c, m = module.config, module.model
        self.n_heads, self.n_kv = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps = c.rms_norm_eps
        self.embed, self.norm = w(m.embed_tokens.weight), w(m.norm.weight)
        tied = module.lm_head.weight is m.embed_tokens.weight
        self.lm_head = self.embed if tied else w(module.lm_head.weight)  # one copy of tied weights
        self.layers = []
        for layer in m.layers:
            a, mlp = layer.self_attn, layer.mlp
            qkv_b = None
            if a.q_proj.bias is not None:
                qkv_b = w(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
            self.layers.append((w(layer.input_layernorm.weight),
                                torch.cat([w(a.q_proj), w(a.k_proj), w(a.v_proj)]), qkv_b,
                                w(a.o_proj), w(a.o_proj.bias), w(layer.post_attention_layernorm.weight),
                                torch.cat([w(mlp.gate_proj), w(mlp.up_proj)]), w(mlp.down_proj)))
        self.batch, self.pack_after, self.packed, self.steps = batch, pack_after, False, 0
        if pack_after == 0:
            self._pack()
        self.kv_dtype = self.embed.dtype if kv_dtype is None else kv_dtype
        p = self.embed.new_empty(1, 1, dtype=self.kv_dtype)  # the rotary layer reads only its dtype and device
        # cos/sin of every position, from the module's own rotary layer, looked up per step. sin carries
        # rotate_half's sign: rotate_half(x) = [-x2, x1] = swap(x) * [-1, +1], so x*cos + rotate_half(x)*sin
        # = x*cos + swap(x)*signed_sin, with swap a flip of the two halves (one op instead of four).
        cos, sin = m.rotary_emb(p[:1, None], torch.arange(max_len, device=p.device)[None])  # [1, max_len, D]
        half = self.head_dim // 2
        self.cos, self.signed_sin = cos[0], torch.cat([-sin[0, :, :half], sin[0, :, half:]], -1)
        # [N, n_kv, max_len, head_dim] per layer, allocated by fill: layer by layer, as the prompt's cache is
        # released, so that both caches are never whole at once
        self.shape = (batch, self.n_kv, max_len, self.head_dim)
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []

    def fill(self, layer: int, keys: Tensor, values: Tensor) -> None:
        """The prompt's keys and values [N, n_kv, P, head_dim] at positions 0..P-1; layers in order, from 0."""
        assert layer == len(self.keys), "fill the layers in order"
        for cache, part in ((self.keys, keys), (self.values, values)):
            cache.append(torch.zeros(self.shape, dtype=self.kv_dtype, device=part.device))
            cache[-1][:, :, :part.shape[2]] = part

    def _pack(self) -> None:
        """Every projection and the LM head into oneDNN's layout (see __init__). Layer by layer, so that at most one
        layer's weights exist twice; the embedding lookup keeps the plain matrix, a tied LM head gets a packed copy."""
        pack = lambda t: torch.ops.mkldnn._reorder_linear_weight(t, self.batch)  # noqa: E731 (batch: a size hint)
        for i, (ln1, qkv_w, qkv_b, o_w, o_b, ln2, gu_w, down_w) in enumerate(self.layers):
            self.layers[i] = (ln1, pack(qkv_w), qkv_b, pack(o_w), o_b, ln2, pack(gu_w), pack(down_w))
        self.lm_head = pack(self.lm_head)
        self.packed = True

    def _linear(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        return F.linear(x, weight, bias)

    def _linear_add(self, residual: Tensor, x: Tensor, weight: Tensor) -> Tensor:
        """residual + x W^T, the add folded into the matmul."""
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, None, "add")
        return torch.addmm(residual, x, weight.t())

    def _rms(self, x: Tensor, weight: Tensor) -> Tensor:
        x32 = x.float()
        return weight * (x32 * x32.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()).to(x.dtype)

    def _attend(self, q: Tensor, layer: int, S: int, bias: Tensor) -> Tensor:
        """One query per row [N, H, D] against cache positions 0..S-1 of `layer`, bias [N*n_kv, 1, S] additive:
        softmax(q K^T / sqrt(D) + bias) V as [N, H*D]. Written out with two batched matmuls: SDPA's flash kernel
        is tiled for long queries, and a single-query step through it cost 1.5x (fp32) to 3x (bf16) the bmm's."""
        N, H, K, D = len(q), self.n_heads, self.n_kv, self.head_dim
        keys = self.keys[layer][:, :, :S].reshape(N * K, S, D)  # a view: (N, n_kv) merge over the preallocated rows
        values = self.values[layer][:, :, :S].reshape(N * K, S, D)
        q = q.reshape(N * K, H // K, D)  # grouped-query: the H // K query heads of a KV head share its keys
        scores = torch.baddbmm(bias, q, keys.transpose(1, 2), alpha=D ** -0.5)  # [N*n_kv, H // n_kv, S]
        return torch.bmm(torch.softmax(scores, -1), values).view(N, H * D)

    @torch.no_grad()
    def step(self, tokens: Tensor, positions: Tensor, slot: int, attn_mask: Tensor) -> Tensor:
        """Logits [N, V] after feeding tokens [N] at rotary positions [N], written to cache slot
        `slot`; attn_mask [N, slot+1] bool: which cached positions each row attends to."""
        # the engine decodes inside its bf16 autocast (for the prefill); here every dtype is explicit, and autocast
        # would run the fp32 attention's matmuls in bf16 (casting the whole cache slice at every step)
        if self.pack_after is not None and not self.packed and self.steps >= self.pack_after:
            self._pack()
        self.steps += 1
        with torch.autocast(tokens.device.type, enabled=False):
            return self._step(tokens, positions, slot, attn_mask)

    def _step(self, tokens: Tensor, positions: Tensor, slot: int, attn_mask: Tensor) -> Tensor:
        # Every elementwise op here costs 5-50 us at rollout sizes on a CPU, as much as a quarter of a
        # small matmul, hence: q and k rotated in one go, residual adds folded into the matmuls (addmm),
        # the attention mask made additive once per step rather than converted in every layer.
        N, H, K, D = len(tokens), self.n_heads, self.n_kv, self.head_dim
        x = F.embedding(tokens, self.embed)  # [N, hidden]
        cos = self.cos.index_select(0, positions)[:, None]  # [N, 1, D] against [N, heads, D]
        sin = self.signed_sin.index_select(0, positions)[:, None]
        S = slot + 1
        bias = torch.zeros((N, 1, 1, S), dtype=self.kv_dtype, device=x.device)
        bias = bias.masked_fill_(~attn_mask[:, None, None], float("-inf")).expand(N, K, 1, S).reshape(N * K, 1, S)
        for i, (ln1, qkv_w, qkv_b, o_w, o_b, ln2, gate_up_w, down_w) in enumerate(self.layers):
            qkv = self._linear(self._rms(x, ln1), qkv_w, qkv_b)  # [N, (H + 2K) D]
            qk = qkv[:, :(H + K) * D].to(self.kv_dtype).view(N, H + K, D)  # a copy only when kv_dtype differs
            swapped = qk.view(N, H + K, 2, D // 2).flip(2).view(N, H + K, D)
            qk = torch.addcmul(qk * cos, swapped, sin)  # rotary embedding of q and k
            self.keys[i][:, :, slot] = qk[:, H:]
            self.values[i][:, :, slot] = qkv[:, (H + K) * D:].view(N, K, D)  # cast into the cache's dtype
            att = self._attend(qk[:, :H], i, S, bias).to(x.dtype)  # [N, H*D]
            x = self._linear_add(x, att, o_w)  # x + attention output projection
            if o_b is not None:
                x = x + o_b
            gate, up = self._linear(self._rms(x, ln2), gate_up_w).chunk(2, dim=-1)
            x = self._linear_add(x, F.silu(gate).mul_(up), down_w)  # x + MLP
        return self._linear(self._rms(x, self.norm), self.lm_head)
