"""Per-worker memory estimate of an RL config, and the check that refuses configs that cannot fit.

Every pool of worker processes (the actor pool, a critic pool, a reward-model pool or the driver
holding the reward model) is estimated as its resident states plus, for each phase of a step, what
that phase adds on top; the pool's peak is the largest phase. Resident: the process itself (on a
CPU device: Python with torch, transformers, tokenizers and pyarrow loaded), fp32 weights, gradients
and AdamW moments of what it trains, and frozen weights at their dtype. The phases
(plan/memory_phases.py) are generation (a training round's and a validation call's), the
no-gradient log-prob passes, the update's forward + backward of one micro-batch, and the optimizer
step; the tensors each holds are sized in plan/memory_terms.py, following the code's own choices
(prompt sharing, packing, token budgets, activation checkpointing, bf16 compute, sdpa attention).
Sizes are upper bounds of one step: every sequence is taken at data.max_prompt_length +
data.max_response_length tokens.

What is approximate, and in which direction:
- within a phase, parts that peak at different moments are not added: the larger moment is taken
  (layer transients vs logits, prefill vs decode); a layer's transient is within ±15 % of torch's
  profiler on the bundled models and SmolLM2;
- the allocator's overhead (freed heap memory not returned to the system) is not counted; on a CPU
  bench/memory.py measures the whole process's peak RSS against this estimate;
- FSDP2's prefetch of the next layer and the communication buffers are not counted, nor a CUDA context.

Memory units: GiB = 2**30 bytes; trainer.memory_per_worker_gb is read in GiB.
"""

from __future__ import annotations

import functools
import glob
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any

from hybridrl.config.async_checks import async_enabled, rollout_workers
from hybridrl.plan.levers import (
    actor_update_batching,
    critic_update_batching,
    critic_values_batching,
    log_prob_batching,
    ref_batching,
)
from hybridrl.plan.memory_phases import (
    VAL_BATCH,
    Forward,
    Phase,
    critic_forward,
    forward_parts,
    generation_phases,
    micro_rows,
    policy_forward,
    reference_forward,
    update_parts,
)
from hybridrl.plan.memory_terms import BF16, FP32, ModelDims
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.plan.roles import critic_batch_plan, critic_pool_workers, needs_critic, needs_reference, needs_teacher
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError

GIB, MIB = 2 ** 30, 2 ** 20
SHARDED = ("fsdp2", "fsdp")  # strategies that shard weights, gradients and AdamW state (parallel/sharding.py)
# RSS of a trainer process before any model: Python, torch, transformers with a Llama-family model class,
# tokenizers, pyarrow and hybridrl's modules imported, a tokenizer and the datasets loaded. Measured 430-530 MiB
# on torch 2.13 / transformers 5.19 (bench/memory.py records it per run); a CPU device only (on a GPU the
# budget is device memory, which this does not use).
RUNTIME_BYTES = 500 * MIB


@functools.lru_cache(maxsize=16)
def read_model_dims(folder: str) -> ModelDims:
    """Dimensions from the folder's config (HF's AutoConfig, so GPT-2's n_embd etc. read as hidden_size),
    parameter counts from the safetensors headers (no tensor is read); a folder without weights (a config
    written to plan a model not downloaded yet) counts a Llama-family model's parameters from its config."""
    from safetensors import safe_open
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(folder).get_text_config()
    heads = c.num_attention_heads
    dims = dict(hidden=c.hidden_size, layers=c.num_hidden_layers, heads=heads,
                kv_heads=getattr(c, "num_key_value_heads", None) or heads,
                head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads,
                intermediate=getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * c.hidden_size,
                vocab=c.vocab_size)
    counts: dict[str, int] = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, "pt") as st:
            counts.update({k: math.prod(st.get_slice(k).get_shape()) for k in st.keys()})
    if not counts:
        return ModelDims(**config_param_counts(c, **dims), **dims)
    per_layer: dict[str, int] = {}
    for key, n in counts.items():
        if m := re.search(r"\.(?:layers|h)\.(\d+)\.", key):
            per_layer[m.group(1)] = per_layer.get(m.group(1), 0) + n
    params = sum(counts.values())
    return ModelDims(params=params, layer_params=max(per_layer.values(), default=0),
                     root_params=params - sum(per_layer.values()),
                     head_params=sum(n for k, n in counts.items() if k.startswith("lm_head.")), **dims)


def config_param_counts(c, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, intermediate: int,
                        vocab: int) -> dict[str, int]:
    """Parameter counts of a Llama-family decoder (Qwen2, Llama, Mistral) from its config: per layer q, k, v,
    o (with q, k, v biases where the family has them: Qwen2, or attention_bias), gate, up, down and two norms;
    the embedding, the final norm and an untied head."""
    if getattr(c, "model_type", None) not in ("qwen2", "llama", "mistral"):
        raise ConfigError(f"{getattr(c, 'name_or_path', 'the model folder')} has no *.safetensors weights to size "
                          f"the model from (only Llama-family configs are counted from config.json alone)")
    q, kv = heads * head_dim, kv_heads * head_dim
    bias = (q + 2 * kv) if getattr(c, "attention_bias", c.model_type == "qwen2") else 0
    layer = hidden * (q + 2 * kv) + bias + q * hidden + 3 * hidden * intermediate + 2 * hidden
    head = 0 if getattr(c, "tie_word_embeddings", True) else vocab * hidden
    root = vocab * hidden + hidden + head
    return dict(params=layers * layer + root, layer_params=layer, root_params=root, head_params=head)


def value_head_params(d: ModelDims) -> int:
    """HF's token-classification head of a value model: Linear(hidden, 1) with a bias."""
    return d.hidden + 1


def value_model_dims(d: ModelDims) -> ModelDims:
    """The critic built from a causal LM: its lm_head (if stored) replaced by the value head
    (models/loading.py load_value_model)."""
    head = value_head_params(d)
    return replace(d, params=d.params - d.head_params + head, root_params=d.root_params - d.head_params + head,
                   head_params=0)


@dataclass(frozen=True)
class PoolMemory:
    """One pool's per-worker estimate. `breakdown` is resident + the peak phase's parts, in bytes."""

    name: str
    workers: int
    resident: dict[str, int]
    phases: tuple[Phase, ...]
    budget: int  # bytes one worker may use
    budget_source: str  # where the budget comes from, for messages

    def total(self, phase: Phase) -> int:
        return sum(self.resident.values()) + sum(phase.parts.values())

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=self.total)

    @property
    def peak_phase(self) -> str:
        return self.peak.name

    @property
    def peak_bytes(self) -> int:
        return self.total(self.peak)

    @property
    def breakdown(self) -> dict[str, int]:
        return {**self.resident, **self.peak.parts}


@dataclass(frozen=True)
class MemoryReport:
    pools: tuple[PoolMemory, ...]

    def describe(self) -> str:
        worst = max(self.pools, key=lambda p: p.peak_bytes / p.budget)
        lines = [(f"memory per worker (estimate): peak {fmt_bytes(worst.peak_bytes)} of "
                  f"{fmt_bytes(worst.budget)} in the {worst.name} pool ({worst.peak_phase})")]
        for p in self.pools:
            lines.append(f"  {p.name} pool, {p.workers} worker(s): peak {fmt_bytes(p.peak_bytes)} in {p.peak_phase}, "
                         f"budget {fmt_bytes(p.budget)} ({p.budget_source})")
            lines += [f"    {name}: {fmt_bytes(n)}" for name, n in p.breakdown.items() if n]
            others = [f"{ph.name} {fmt_bytes(p.total(ph))}" for ph in p.phases if ph is not p.peak]
            if others:
                lines.append(f"    other phases: {', '.join(others)}")
        return "\n".join(lines)


def fmt_bytes(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB" if n >= MIB else f"{n / 1024:.1f} KiB"


def _shards(strategy: str, world: int) -> int:
    """Ways a role's trainable states are split; with one rank every strategy is the plain model."""
    return world if strategy in SHARDED and world > 1 else 1


def _trainable(role: str, d: ModelDims, shards: int) -> dict[str, int]:
    """Weights and gradients (4 bytes per parameter each) and AdamW's two moments (8), 1/shards each."""
    per_rank = -(-d.params // shards)
    return {f"{role} weights": FP32 * per_rank, f"{role} gradients": FP32 * per_rank,
            f"{role} AdamW moments": 2 * FP32 * per_rank}


def lora_params(d: ModelDims, rank: int, targets: list[str], exclude: list[str]) -> int:
    """LoRA adapter parameters: r·(in + out) for each adapted linear layer of each decoder layer.
    Llama-family module names; `all-linear` adapts all seven of them (peft never adapts the LM head)."""
    attn = d.heads * d.head_dim
    shapes = {"q_proj": (d.hidden, attn), "k_proj": (d.hidden, d.kv_heads * d.head_dim),
              "v_proj": (d.hidden, d.kv_heads * d.head_dim), "o_proj": (attn, d.hidden),
              "gate_proj": (d.hidden, d.intermediate), "up_proj": (d.hidden, d.intermediate),
              "down_proj": (d.intermediate, d.hidden)}
    names = (set(shapes) if list(targets) == ["all-linear"] else set(targets)) - set(exclude)
    return d.layers * sum(rank * (i + o) for name, (i, o) in shapes.items() if name in names)


def _lora_trainable(role: str, d: ModelDims, trained: int) -> dict[str, int]:
    """LoRA: the frozen base weights and the `trained` parameters added to them (the adapters, and a value
    model's head copy that peft trains whole); gradients and AdamW moments of those only."""
    return {f"{role} weights": FP32 * (d.params + trained), f"{role} gradients": FP32 * trained,
            f"{role} AdamW moments": 2 * FP32 * trained}


def _gathered(role: str, d: ModelDims, shards: int) -> dict[str, int]:
    """No-gradient passes of a sharded role run on a full copy of its weights (sharding.gathered)."""
    return {f"{role} gathered weights": FP32 * d.params} if shards > 1 else {}


def _phase(name: str, parts: dict[str, int], key: str, batching, rows: int, s: int, divides: int = 0) -> Phase:
    """A pass's phase, scaled by its micro-batch size key or, with a token budget, by the budget's key."""
    if batching.dynamic:
        return Phase(name, parts, key.replace("micro_batch_size_per_gpu", "max_token_len_per_gpu"),
                     min(batching.max_tokens, rows * s), knob_min=s)
    return Phase(name, parts, key, micro_rows(batching, rows, s), divides)


def _update_phase(role: str, key: str, d: ModelDims, plan: BatchPlan, shards: int, batching, f, lm_head: bool,
                  cfg: RLConfig) -> Phase:
    """Forward + backward of one micro-batch. FSDP2 keeps the root group (embeddings, final norm, head)
    and one decoder layer gathered, and with several micro-batches accumulates unsharded gradients
    (gradient sync only after the last one: sharding.FullyShard.set_gradient_sync)."""
    (s, t), rows = _lengths(cfg), plan.mini_batch_responses_per_worker
    b = micro_rows(batching, rows, s)
    parts = update_parts(f, d, b, cfg.actor_rollout_ref.rollout.n, s - t, t, lm_head)
    if shards > 1:
        parts["gathered root group + one layer"] = FP32 * (d.root_params + d.layer_params)
        if b < rows:
            parts["unsharded accumulated gradients"] = FP32 * d.params
    if batching.dynamic:
        key = key.replace("ppo_micro_batch_size_per_gpu", "ppo_max_token_len_per_gpu")
        return Phase(f"{role} update", parts, key, min(batching.max_tokens, rows * s), knob_min=s)
    return Phase(f"{role} update", parts, key, b, rows)


def _optimizer_phase(role: str, d: ModelDims, shards: int, device: str, trained: int | None = None) -> Phase:
    """torch's AdamW step. Plain fp32 tensors get the fused kernel (workers/optim.py): no temporaries. Sharded
    (DTensor) parameters get the default: foreach on CUDA, which materializes sqrt(v) of every trained
    parameter at once (`trained`, default all); on the CPU a per-tensor loop, the largest tensor's."""
    if shards == 1:
        return Phase(f"{role} optimizer step", {})
    n = -(-(trained or d.params) // shards) if device != "cpu" else max(d.vocab, d.intermediate) * d.hidden // shards
    return Phase(f"{role} optimizer step", {"AdamW step temporaries": FP32 * n})


def _dims(path: str, key: str) -> ModelDims:
    from hybridrl.models.loading import readable, resolve_model_path

    with readable(path, key):  # a folder transformers cannot read: one line naming the key
        return read_model_dims(resolve_model_path(path, key))


def _lengths(cfg: RLConfig) -> tuple[int, int]:
    """(S, T): padded sequence and response lengths of every forward after generation."""
    d = cfg.data
    return d.max_prompt_length + d.max_response_length, d.max_response_length


def _vllm_engine(cfg: RLConfig, d: ModelDims) -> dict[str, int]:
    """rollout.name=vllm: the engine's own copy of the weights (at rollout.dtype, lm_head untied:
    rollout/vllm.py) and its KV cache (rollout.cpu_kv_cache_gb on CPU; on GPU vLLM takes
    rollout.gpu_memory_utilization of the device, counted as such)."""
    r = cfg.actor_rollout_ref.rollout
    if r.name != "vllm":
        return {}
    width = 4 if r.dtype == "float32" else 2
    untied = 0 if d.head_params else d.vocab * d.hidden
    if cfg.trainer.device == "cuda":
        return {"vLLM engine (gpu_memory_utilization)": int(r.gpu_memory_utilization * _budget(cfg, "cuda", 1)[0])}
    return {"vLLM weights": width * (d.params + untied), "vLLM KV cache": int(r.cpu_kv_cache_gb * GIB)}


def _critic_parts(cfg: RLConfig, world: int) -> tuple[dict[str, int], list[Phase]]:
    """The critic's states and phases on a worker of a `world`-rank critic."""

    c = cfg.critic
    d = value_model_dims(_dims(c.model.path or cfg.actor_rollout_ref.model.path, "critic.model.path"))
    plan, shards, (s, t) = critic_batch_plan(cfg), _shards(c.strategy, world), _lengths(cfg)
    trained = _critic_lora_trained(cfg, d)  # with LoRA, plan/checks.py refuses sharding over ranks: shards is 1 then
    rows, f, n = -(-plan.responses_per_step // world), critic_forward(cfg, d), cfg.actor_rollout_ref.rollout.n
    values = critic_values_batching(cfg)
    parts = {**_gathered("critic", d, shards), **forward_parts(f, d, micro_rows(values, rows, s), n, s - t, t, False)}
    phases = [_phase("critic values", parts, "critic.forward_micro_batch_size_per_gpu", values, rows, s),
              _update_phase("critic", "critic.ppo_micro_batch_size_per_gpu", d, plan, shards,
                            critic_update_batching(cfg, plan.micro_batch_responses_per_worker), f, False, cfg),
              _optimizer_phase("critic", d, shards, cfg.trainer.device, trained)]
    return (_lora_trainable("critic", d, trained) if trained else _trainable("critic", d, shards)), phases


def _lora_trained(m, d: ModelDims, whole: int = 0) -> int | None:
    """Parameters a LoRA model section (m: its lora_* keys) trains: the adapters plus `whole` parameters
    trained in full; None without LoRA."""
    if m.lora_rank == 0:
        return None
    return lora_params(d, m.lora_rank, m.target_modules, m.exclude_modules) + whole


def _critic_lora_trained(cfg: RLConfig, d: ModelDims) -> int | None:
    """Parameters a LoRA critic trains: its adapters and a copy of the value head (peft's modules_to_save
    keeps the original, frozen, next to the trained one); None without LoRA."""
    return _lora_trained(cfg.critic.model, d, value_head_params(d))


def _reward_parts(cfg: RLConfig, workers: int) -> tuple[dict[str, int], list[Phase]]:
    """Inference-only reward model: its weights, and forwards of micro-batches of the scored responses
    (a generation round's, or a validation call's) over the last hidden states (workers/reward_model.py)."""
    rm, d_, r = cfg.reward_model, cfg.data, cfg.actor_rollout_ref.rollout
    d = _dims(rm.model.path, "reward_model.model.path")
    scored = max((d_.gen_batch_size or d_.train_batch_size) * r.n, VAL_BATCH if d_.val_files else 0)
    (s, t), rows = _lengths(cfg), -(-scored // workers)
    b = max(1, min(rm.micro_batch_size_per_gpu, rows))
    phase = Phase("reward scoring", forward_parts(Forward(), d, b, 1, s - t, t, lm_head=False),
                  "reward_model.micro_batch_size_per_gpu", b)
    return {"reward model weights": FP32 * d.params}, [phase]


def _reference(cfg: RLConfig, d: ModelDims, rows: int, adapter) -> tuple[dict[str, int], Phase]:
    """The frozen reference: its weights at ref.fsdp_config.model_dtype (never sharded; with LoRA the
    policy's own module, adapter off: no copy) and its log-prob pass."""
    f, (s, t) = reference_forward(cfg, d), _lengths(cfg)
    batching = ref_batching(cfg)
    resident = {} if adapter else {"reference weights": (BF16 if f.bf16_weights else FP32) * d.params}
    parts = forward_parts(f, d, micro_rows(batching, rows, s), cfg.actor_rollout_ref.rollout.n, s - t, t)
    return resident, _phase("reference log-probs", parts, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                            batching, rows, s)


def _teacher(cfg: RLConfig, rows: int) -> tuple[dict[str, int], Phase]:
    """The frozen distillation teacher (workers/build.py build_teacher): its own weights, at the reference's
    ref.fsdp_config.model_dtype, and its log-prob pass, batched by the reference's keys."""
    d = _dims(cfg.distillation.teacher_model.model_path, "distillation.teacher_model.model_path")
    f, (s, t), batching = reference_forward(cfg, d), _lengths(cfg), ref_batching(cfg)
    parts = forward_parts(f, d, micro_rows(batching, rows, s), cfg.actor_rollout_ref.rollout.n, s - t, t)
    return ({"teacher weights": (BF16 if f.bf16_weights else FP32) * d.params},
            _phase("teacher log-probs", parts, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", batching, rows, s))


def _teacher_pooled(cfg: RLConfig) -> bool:
    """The teacher has its own Ray pool (distillation.enable_resource_pool), not a place in the actor's."""
    return cfg.trainer.backend != "local" and cfg.distillation.enable_resource_pool


def _policy_parts(cfg: RLConfig, plan: BatchPlan) -> tuple[dict[str, int], tuple[Phase, ...]]:
    """Policy, reference, teacher, and (placed with them) critic and in-process reward model of one policy worker."""

    arr, world, (s, t) = cfg.actor_rollout_ref, plan.world_size, _lengths(cfg)
    d = _dims(arr.model.path, "actor_rollout_ref.model.path")
    shards, f = _shards(arr.actor.strategy, world), policy_forward(cfg, d)
    adapter = _lora_trained(arr.model, d)
    resident = _lora_trainable("policy", d, adapter) if adapter else _trainable("policy", d, shards)
    phases = generation_phases(cfg, d, world, _gathered("policy", d, shards))
    resident.update(_vllm_engine(cfg, d))
    rows = -(-plan.responses_per_step // world)
    alg = cfg.algorithm  # a synchronous run recomputes π_old only then (trainer/old_policy.py):
    if not plan.on_policy or alg.use_kl_in_reward or alg.rollout_correction.rollout_rs is not None:
        batching = log_prob_batching(cfg)
        parts = forward_parts(f, d, micro_rows(batching, rows, s), arr.rollout.n, s - t, t)
        phases.append(_phase("policy log-probs", {**_gathered("policy", d, shards), **parts},
                             "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", batching, rows, s))
    if needs_reference(cfg):
        ref_resident, ref_phase = _reference(cfg, d, rows, adapter)
        resident.update(ref_resident)
        phases.append(ref_phase)
    if needs_teacher(cfg) and not _teacher_pooled(cfg):
        teacher_resident, teacher_phase = _teacher(cfg, rows)
        resident.update(teacher_resident)
        phases.append(teacher_phase)
    phases += [_update_phase("policy", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", d, plan, shards,
                             actor_update_batching(cfg, plan.micro_batch_responses_per_worker), f, True, cfg),
               _optimizer_phase("policy", d, shards, cfg.trainer.device, adapter)]
    extras = []
    if needs_critic(cfg) and critic_pool_workers(cfg) is None:
        extras.append(_critic_parts(cfg, world))
    if cfg.reward_model.enable and cfg.trainer.backend == "local":  # one process holds every role
        extras.append(_reward_parts(cfg, 1))
    for more_resident, more_phases in extras:
        resident.update(more_resident)
        phases += more_phases
    return resident, tuple(phases)


def _rollout_pool_parts(cfg: RLConfig, workers: int) -> tuple[dict[str, int], tuple[Phase, ...]]:
    """One worker of the async rollout pool (distributed/rollout_worker.py): its own weights (hf: the model folder's
    fp32 copy it samples with; vllm: the engine's weights and KV cache, the copy is dropped), a training round's
    generation of its share of the prompts, and a weight push (the pushed state dict, deserialized from Ray's
    object store, beside the weights it replaces). It never validates: the trainer pool does."""
    d = _dims(cfg.actor_rollout_ref.model.path, "actor_rollout_ref.model.path")
    vllm = _vllm_engine(cfg, d)
    resident = vllm or {"rollout weights (own copy)": FP32 * d.params}
    generation = generation_phases(cfg, d, workers, {})[0]
    push = Phase("weight push", {"pushed weights": FP32 * d.params})
    return resident, (generation, push)


def _critic_per_node(cfg: RLConfig) -> int:
    """The critic pool's workers on one node: its n_gpus_per_node when laid out per node, else Ray spreads
    critic.n_workers over the actor's nodes (rounded up)."""
    c = cfg.critic
    return c.n_gpus_per_node if c.enable_resource_pool else -(-c.n_workers // cfg.trainer.nnodes)


def _processes_per_node(cfg: RLConfig) -> int:
    """Processes sharing one node's RAM: a node's policy workers, the critic pool's share of the nodes
    (all of it when nnodes=1), a node of the reward-model pool, the driver when it holds the reward model, and a
    node of the teacher pool."""

    tr, rm = cfg.trainer, cfg.reward_model
    if tr.backend == "local":
        return 1
    n = tr.n_gpus_per_node
    if critic_pool_workers(cfg) is not None and needs_critic(cfg):
        n += _critic_per_node(cfg)
    if rm.enable:
        n += max(1, rm.n_gpus_per_node) if rm.enable_resource_pool else 1
    if needs_teacher(cfg) and _teacher_pooled(cfg):
        n += max(1, cfg.distillation.n_gpus_per_node)
    if async_enabled(cfg):  # the async rollout pool's workers share the node too
        n += cfg.rollout.n_gpus_per_node
    return n


def _budget(cfg: RLConfig, device: str, processes: int) -> tuple[int, str]:
    """(bytes one worker may use, where that figure comes from)."""
    gb = cfg.trainer.memory_per_worker_gb
    if gb is not None:  # > 0: validate_rl_config checked it
        return int(gb * GIB), f"trainer.memory_per_worker_gb={gb}"
    if device == "cpu":
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return ram // processes, f"{fmt_bytes(ram)} of RAM / {processes} process(es) on a node"
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory, f"the memory of {torch.cuda.get_device_name(0)}"
    raise ConfigError(f"trainer.device={device}, but torch sees no GPU on this machine to read its memory size from; "
                      "set trainer.memory_per_worker_gb to one worker's GPU memory in GiB (e.g. 80)")


def _runtime(device: str) -> dict[str, int]:
    """The process itself, counted where the budget is host memory (see RUNTIME_BYTES)."""
    return {"runtime (Python, torch, transformers)": RUNTIME_BYTES} if device == "cpu" else {}


def estimate_memory(cfg: RLConfig, plan: BatchPlan) -> MemoryReport:
    """Every pool's per-worker estimate (see the module doc); `plan` is the actor's batch plan."""

    tr, rm = cfg.trainer, cfg.reward_model
    procs = _processes_per_node(cfg)
    resident, phases = _policy_parts(cfg, plan)
    pools = [PoolMemory("actor", plan.world_size, _runtime(tr.device) | resident, phases,
                        *_budget(cfg, tr.device, procs))]
    if needs_critic(cfg) and (critic_workers := critic_pool_workers(cfg)) is not None:
        resident, phases = _critic_parts(cfg, critic_workers)
        pools.append(PoolMemory("critic", critic_workers, _runtime(tr.device) | resident, tuple(phases),
                                *_budget(cfg, tr.device, procs)))
    if rm.enable and tr.backend != "local":
        pooled = rm.enable_resource_pool
        workers = max(1, rm.n_gpus_per_node * rm.nnodes) if pooled else 1
        device = tr.device if pooled else "cpu"  # the driver loads the reward model on the CPU (trainer/build.py)
        resident, phases = _reward_parts(cfg, workers)
        pools.append(PoolMemory("reward_model" if pooled else "driver (reward model)", workers,
                                _runtime(device) | resident, tuple(phases), *_budget(cfg, device, procs)))
    if needs_teacher(cfg) and _teacher_pooled(cfg):
        workers = max(1, cfg.distillation.n_gpus_per_node * cfg.distillation.nnodes)
        resident, phase = _teacher(cfg, -(-plan.responses_per_step // workers))
        pools.append(PoolMemory("teacher", workers, _runtime(tr.device) | resident, (phase,),
                                *_budget(cfg, tr.device, procs)))
    if async_enabled(cfg):
        workers = rollout_workers(cfg)
        resident, phases = _rollout_pool_parts(cfg, workers)
        pools.append(PoolMemory("rollout", workers, _runtime(tr.device) | resident, phases,
                                *_budget(cfg, tr.device, procs)))
    return MemoryReport(tuple(pools))


# ---- the check, and the nearest settings that fit -------------------------------------------------

class MemoryBudgetError(ConfigError):
    """A pool's estimated peak exceeds its budget. `fixes`: override sets (config key -> value), each of
    which makes every pool fit under the same estimate."""

    def __init__(self, message: str, fixes: list[dict[str, Any]]):
        super().__init__(message)
        self.fixes = fixes
