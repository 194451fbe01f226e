"""The phases of a step as plan/memory.py counts them: for each pass, what it adds on top of a
worker's resident states, from the config keys that shape it (micro-batch sizes or token budgets,
prompt sharing, packing, activation checkpointing, compute dtypes). Tensor sizes come from
plan/memory_terms.py; this module decides which tensors a pass holds at once.

Every sequence is taken at its full length (data.max_prompt_length + data.max_response_length = S):
a bound for padded rows, and the token count packing and token budgets see in the worst batch.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Optional

from hybridrl.plan.levers import MicroBatching, dtype_name
from hybridrl.plan.memory_terms import (
    BF16,
    FP32,
    ModelDims,
    Segment,
    autocast_weight_bytes,
    decode_weight_bytes,
    distinct_prompts,
    head_positions,
    kv_cache_bytes,
    layer_transient_bytes,
    logits_transient_bytes,
    packed_rows,
    padded_segments,
    saved_activation_bytes,
    sampling_bytes,
)
from hybridrl.config.schema import RLConfig

VAL_BATCH = 256  # responses per validation generate call over all workers (trainer/validate.py's batch_size)


@dataclass(frozen=True)
class Phase:
    name: str
    parts: dict[str, int]  # bytes on top of the pool's resident states
    knob: Optional[str] = None  # the config key whose value scales this phase
    knob_value: int = 0  # its value in effect (capped by the rows a worker has)
    knob_divides: int = 0  # > 0: a valid knob value must divide this (micro-batches of a mini-batch)
    knob_min: int = 1  # the smallest valid value (a token budget holds one whole sequence)


@dataclass(frozen=True)
class Forward:
    """How a role's forwards run (models/forward.py Layout, models/precision.py), from its config section."""

    share: bool = False  # model.share_prompt_prefix: each distinct prompt once per micro-batch
    packed: bool = False  # model.use_remove_padding: real tokens packed into rows of `width` or more
    width: int = 0  # the packed row width: the model's hidden size (workers/build.py _width)
    compute: str = "fp32"  # "fp32" | "bf16"
    bf16_weights: bool = False  # the module itself is bf16 (a reference with model_dtype=bf16)
    checkpointing: bool = False  # model.enable_gradient_checkpointing (update forwards only)
    contiguous: bool = True  # micro-batches of consecutive rows (no actor.shuffle)
    attention: str = "sdpa"  # transformers' default attention implementation

    @property
    def act(self) -> int:
        return BF16 if self.compute == "bf16" or self.bf16_weights else FP32

    @property
    def autocast(self) -> bool:
        """bf16 compute over fp32 weights: torch.autocast, with its bf16 weight copies."""
        return self.compute == "bf16" and not self.bf16_weights


def policy_forward(cfg: RLConfig, d: ModelDims) -> Forward:
    m, a = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    return Forward(m.share_prompt_prefix, m.use_remove_padding, d.hidden,
                   dtype_name("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
                              a.fsdp_config.mixed_precision.param_dtype),
                   checkpointing=m.enable_gradient_checkpointing, contiguous=not a.shuffle)


def reference_forward(cfg: RLConfig, d: ModelDims) -> Forward:
    from hybridrl.plan.levers import ref_compute_dtype

    f = policy_forward(cfg, d)
    stored = dtype_name("actor_rollout_ref.ref.fsdp_config.model_dtype", cfg.actor_rollout_ref.ref.fsdp_config.model_dtype)
    return Forward(f.share, f.packed, f.width, ref_compute_dtype(cfg), stored == "bf16")


def critic_forward(cfg: RLConfig, d: ModelDims) -> Forward:
    """The critic runs every row's prompt itself (no sharing), packed with critic.model.use_remove_padding."""
    m = cfg.critic.model
    return Forward(False, m.use_remove_padding, d.hidden,
                   dtype_name("critic.model.fsdp_config.mixed_precision.param_dtype",
                              m.fsdp_config.mixed_precision.param_dtype),
                   checkpointing=m.enable_gradient_checkpointing, contiguous=not cfg.critic.shuffle)


def micro_rows(batching: MicroBatching, rows: int, seq_len: int) -> int:
    """Responses in a pass's largest micro-batch over a worker's `rows`: the configured size, or with a token
    budget the fewest bins of at most max_tokens tokens (sequences of seq_len), balanced (batching.py)."""
    if not batching.dynamic:
        return max(1, min(batching.size, rows))
    bins = max(1, math.ceil(rows * seq_len / batching.max_tokens))
    return max(1, math.ceil(rows / bins))


def _segments(f: Forward, d: ModelDims, rows: int, n: int, p: int, t: int) -> tuple[list[Segment], str, int]:
    """(the forward calls of a micro-batch of `rows` responses, the logits layout, the positions the head runs on)."""
    prompts = distinct_prompts(rows, n, f.contiguous) if f.share else rows
    if f.packed:
        r, length, k = packed_rows(rows, prompts, p, t, f.share, f.width)
        return [Segment(r, length, length)], "packed", r * k
    segs = padded_segments(rows, prompts, p, t, f.share)
    layout = "shared" if f.share else "padded"
    return segs, layout, head_positions(segs, layout, rows, prompts, t)


def _larger(*moments: dict[str, int]) -> dict[str, int]:
    """The moment of a pass that holds the most: passes free one part before the next grows."""
    return max(moments, key=lambda parts: sum(parts.values()))


def forward_parts(f: Forward, d: ModelDims, rows: int, n: int, p: int, t: int, lm_head: bool = True) -> dict[str, int]:
    """A forward without gradients over a micro-batch of `rows` responses: inside the layers, one layer's
    transient (plus, in the padded prompt-sharing layout, the responses' KV cache, whole at the last layer);
    after them, the logits and their log_softmax (or a value model's final hidden states)."""
    segs, layout, head_at = _segments(f, d, rows, n, p, t)
    inside = {"layer transient": max(layer_transient_bytes(d, s, f.attention, f.act) for s in segs)}
    if layout == "shared":
        inside["KV cache"] = kv_cache_bytes(d, rows, p + t, f.act)
    if lm_head:
        after = {"logits": logits_transient_bytes(d, rows, p + t, t, layout, head_at)}
    else:
        after = {"hidden states": f.act * sum(s.tokens for s in segs) * d.hidden}
    parts = _larger(inside, after)
    if f.autocast:
        parts["bf16 weight copies (autocast)"] = autocast_weight_bytes(d)
    return parts


def update_parts(f: Forward, d: ModelDims, rows: int, n: int, p: int, t: int, lm_head: bool = True) -> dict[str, int]:
    """Forward + backward of a training micro-batch of `rows` responses: the saved activations, plus at the
    forward's end the larger of the padded prompt-sharing KV cache and the logits' transients."""
    segs, layout, head_at = _segments(f, d, rows, n, p, t)
    parts = {"saved activations": saved_activation_bytes(d, segs, rows, t, f.attention, lm_head, f.checkpointing,
                                                         f.act, f.autocast, head_at if lm_head else None)}
    extra = {"KV cache": kv_cache_bytes(d, rows, p + t, f.act)} if layout == "shared" else {}
    if lm_head:
        extra = _larger(extra, {"logits": logits_transient_bytes(d, rows, p + t, t, layout, head_at)})
    parts.update(extra)
    if f.autocast:
        parts["bf16 weight copies (autocast)"] = autocast_weight_bytes(d)
    return parts


def generation_parts(d: ModelDims, rows: int, n: int, p: int, t: int, bf16: bool, do_sample: bool,
                     lean: bool, packed: bool = False) -> dict[str, int]:
    """One generate chunk of `rows` responses to prompts of p tokens (rollout/hf.py), the larger of
      prefill: each distinct prompt's forward (a layer's transient, its KV cache) and, when rows share
               prompts, the cache given to every row (index_select, layer by layer);
      decode: the decoder's weights (rollout/decode.py: fused copies, or a bf16 copy of all), the KV cache
              preallocated for p + t positions (fp32 in the lean decoder, the weights' dtype in a StaticCache), and a step's sampling tensors."""
    prompts = distinct_prompts(rows, n)
    prefill = {"prefill layer transient": layer_transient_bytes(d, Segment(prompts, p, p)),
               "prompt KV cache": kv_cache_bytes(d, prompts, p) + (kv_cache_bytes(d, rows, p) if prompts < rows else 0)}
    # the lean decoder keeps its cache in fp32 whatever the weights' dtype (rollout/decode.py: fp32 attention)
    decode = {"KV cache": kv_cache_bytes(d, rows, p + t, BF16 if bf16 and not lean else FP32),
              "sampling logits": sampling_bytes(d, rows, do_sample)}
    if lean:
        decode["decoder weights"] = decode_weight_bytes(d, bf16, packed)
    if bf16:
        prefill["bf16 weight copies (autocast)"] = autocast_weight_bytes(d)
    return _larger(prefill, decode)


def _file_rows(path: str) -> int | None:
    """Rows of a parquet (from its footer) or jsonl file; None if it cannot be read now."""
    try:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            return pq.read_metadata(path).num_rows
        with open(path) as f:
            return sum(1 for line in f if line.strip())
    except (OSError, ValueError):
        return None


def validation_prompts(cfg: RLConfig) -> int:
    """Prompts of the validation set: data.val_max_samples, else the files' rows (a file that cannot be read
    yet counts as one full validation call, VAL_BATCH responses)."""
    d = cfg.data
    rows = [_file_rows(p) for p in d.val_files]
    total = sum(r for r in rows if r is not None) if None not in rows else VAL_BATCH
    return min(total, d.val_max_samples) if d.val_max_samples > 0 else total


def generation_phases(cfg: RLConfig, d: ModelDims, world: int, gathered: dict[str, int]) -> list[Phase]:
    """A training round's generation, and one validation call's (trainer/validate.py: about VAL_BATCH responses
    per call, its prompts split over the workers), each in chunks of at most rollout.max_num_seqs (rollout/hf.py).
    `gathered`: the full weights a sharded policy gathers to generate with."""
    from hybridrl.models.families import FAMILY

    r, data = cfg.actor_rollout_ref.rollout, cfg.data
    s, t = data.max_prompt_length + data.max_response_length, data.max_response_length
    key = "actor_rollout_ref.rollout.max_num_seqs"
    train = -(-(data.gen_batch_size or data.train_batch_size) // world) * r.n
    calls = [("rollout", train, r.n, True)]
    if data.val_files:
        vn = r.val_kwargs.n
        prompts = min(max(1, VAL_BATCH // vn), validation_prompts(cfg))
        calls.append(("validation", -(-prompts // world) * vn, vn, r.val_kwargs.do_sample))
    phases = []
    for name, rows, n, sample in calls:
        k = min(r.max_num_seqs, rows)
        if r.name == "vllm":  # vLLM's own weights and KV cache are resident (_vllm_engine); only its outputs here
            phases.append(Phase(name, {"sampled token logits": FP32 * k * d.vocab}, key, k))
            continue
        lean = r.lean_decode and _model_type(cfg) in FAMILY
        # packed only on an x86 CPU (rollout/decode.can_pack): counted wherever asked for, the larger estimate
        packed = lean and r.pack_weights and not cfg.trainer.device.startswith("cuda")
        parts = generation_parts(d, k, n, s - t, t, r.dtype == "bfloat16", sample, lean, packed)
        phases.append(Phase(name, {**gathered, **parts}, key, k))
    return phases


def _model_type(cfg: RLConfig) -> str | None:
    from hybridrl.models.loading import resolve_model_path

    try:
        with open(os.path.join(resolve_model_path(cfg.actor_rollout_ref.model.path, "actor_rollout_ref.model.path"),
                               "config.json")) as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError):
        return None
