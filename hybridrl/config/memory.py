"""Per-worker memory estimate of an RL config, and the check that refuses configs that cannot fit.

Every pool of worker processes (the actor pool, a critic pool, a reward-model pool or the driver
holding the reward model) is estimated as its resident states plus, for each phase of a step, what
that phase adds on top; the pool's peak is the largest phase. All tensors are fp32 (4 bytes), as
the models are loaded. Sizes are upper bounds of one step: every sequence is padded to
data.max_prompt_length + data.max_response_length tokens (P + T = S).

What is approximate, and in which direction:
- activations follow the tensors autograd saves in HF's eager attention (see `saved_activation_bytes`);
  sdpa/flash attention saves less for long sequences (no [heads, S, S] probabilities);
- transients inside a phase are summed as if alive together (conservative), allocator
  fragmentation and the CUDA context are not counted, nor the driver's data and buffers;
- FSDP2's prefetch of the next layer and the communication buffers are not counted.

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

from hybridrl.config.plan import BatchPlan
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError

FP32 = 4  # bytes per element: weights, gradients, moments, activations and KV cache are all fp32
GIB, MIB = 2 ** 30, 2 ** 20
SHARDED = ("fsdp2", "fsdp")  # strategies that shard weights, gradients and AdamW state (distributed/sharding.py)
VAL_BATCH = 256  # responses per validation generate call over all workers (trainer/validate.py's batch_size)


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


@functools.lru_cache(maxsize=16)
def read_model_dims(folder: str) -> ModelDims:
    """Dimensions from the folder's config (HF's AutoConfig, so GPT-2's n_embd etc. read as hidden_size),
    parameter counts from the safetensors headers (no tensor is read)."""
    from safetensors import safe_open
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(folder).get_text_config()
    counts: dict[str, int] = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, "pt") as st:
            counts.update({k: math.prod(st.get_slice(k).get_shape()) for k in st.keys()})
    if not counts:
        raise ConfigError(f"{folder} has no *.safetensors weights to size the model from")
    per_layer: dict[str, int] = {}
    for key, n in counts.items():
        if m := re.search(r"\.(?:layers|h)\.(\d+)\.", key):
            per_layer[m.group(1)] = per_layer.get(m.group(1), 0) + n
    heads, params = c.num_attention_heads, sum(counts.values())
    return ModelDims(
        params=params, layer_params=max(per_layer.values(), default=0), root_params=params - sum(per_layer.values()),
        head_params=sum(n for k, n in counts.items() if k.startswith("lm_head.")), hidden=c.hidden_size,
        layers=c.num_hidden_layers, heads=heads, kv_heads=getattr(c, "num_key_value_heads", None) or heads,
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads,
        intermediate=getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * c.hidden_size,
        vocab=c.vocab_size)


def value_head_params(d: ModelDims) -> int:
    """HF's token-classification head of a value model: Linear(hidden, 1) with a bias."""
    return d.hidden + 1


def value_model_dims(d: ModelDims) -> ModelDims:
    """The critic built from a causal LM: its lm_head (if stored) replaced by the value head
    (models/loading.py load_value_model)."""
    head = value_head_params(d)
    return replace(d, params=d.params - d.head_params + head, root_params=d.root_params - d.head_params + head,
                   head_params=0)


# ---- formulas: bytes of one kind of tensor -------------------------------------------------------

def kv_cache_bytes(d: ModelDims, seqs: int, seq_len: int) -> int:
    """K and V of every layer: 2 · layers · kv_heads · head_dim fp32 values per token."""
    return FP32 * 2 * d.layers * d.kv_heads * d.head_dim * seqs * seq_len


def saved_activation_bytes(d: ModelDims, batch: int, seq_len: int, response_len: int, lm_head: bool = True) -> int:
    """Bytes autograd saves for backward in one training forward of `batch` sequences of `seq_len` tokens.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4.1,
    count s·b·h·(34 + 5·a·s/h) bytes per layer for fp16 GPT with dropout. Redone for what HF's
    Qwen2/Llama layer saves in fp32 without dropout (checked against saved_tensors_hooks in
    tests/unit/config/test_memory.py), per sequence, in elements (s tokens, h hidden, a heads of size
    d, I the MLP width):
      2 RMSNorms: input, x·rsqrt(mean x²), weight·(...) 3·s·h each, + rsqrt s each   6·s·h + 2·s
      attention: q, k, v as the score/value matmuls read them (k, v repeated to a heads
                 under GQA) and the o_proj input                                     4·s·a·d
                 softmax probabilities of eager attention [a, s, s]                   a·s²
      gated MLP: gate, silu(gate), up, silu(gate)·up                                 4·s·I
    RoPE saves nothing of size (cos/sin need no gradient, so its products keep only cos and sin,
    2·s·d shared by all layers). The head saves the final norm's 3·s·h + s and, over the T response
    positions, log_softmax and its exp (the entropy) 2·T·V; a value head saves only [s, 1].
    """
    s, h = seq_len, d.hidden
    layer = 6 * s * h + 2 * s + 4 * s * d.heads * d.head_dim + d.heads * s * s + 4 * s * d.intermediate
    rotary = 2 * s * d.head_dim
    head = 3 * s * h + s + (2 * response_len * d.vocab if lm_head else s)
    return FP32 * batch * (d.layers * layer + rotary + head)


def logits_bytes(d: ModelDims, batch: int, seq_len: int, response_len: int) -> int:
    """The LM head's [b, S, V] logits (HF computes every position; models/forward.py slices the response
    positions, a view that keeps them alive), the temperature-scaled [b, T, V] slice and one more
    [b, T, V]: log_softmax without gradients, the entropy's p·log p in training."""
    return FP32 * batch * d.vocab * (seq_len + 2 * response_len)


def forward_transient_bytes(d: ModelDims, batch: int, seq_len: int) -> int:
    """Live tensors of one decoder layer in a forward without gradients (earlier layers' are freed):
    the residual stream and its normed copy, plus the larger of attention (q, k, v and eager attention's
    scores and probabilities, [a, s, s] each) and the MLP (silu(gate), up and their product)."""
    s = seq_len
    attention = s * (d.heads + 2 * d.kv_heads) * d.head_dim + 2 * d.heads * s * s
    mlp = 3 * s * d.intermediate
    return FP32 * batch * (2 * s * d.hidden + max(attention, mlp))


# ---- phases and pools ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Phase:
    name: str
    parts: dict[str, int]  # bytes on top of the pool's resident states
    knob: str | None = None  # the config key whose value scales this phase
    knob_value: int = 0  # its value in effect (capped by the rows a worker has)
    knob_divides: int = 0  # > 0: a valid knob value must divide this (micro-batches of a mini-batch)


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
        lines = [(f"memory per worker (fp32 estimate): peak {fmt_bytes(worst.peak_bytes)} of "
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


def _forward_phase(name: str, knob: str, configured: int, rows: int, d: ModelDims, s: int, t: int,
                   extra: dict[str, int], lm_head: bool = True) -> Phase:
    """A forward without gradients over micro-batches of min(configured, rows) sequences."""
    b = min(configured, rows)
    out = logits_bytes(d, b, s, t) if lm_head else FP32 * b * s * d.hidden  # else: the final hidden states
    return Phase(name, {**extra, "layer transient": forward_transient_bytes(d, b, s),
                        "logits" if lm_head else "hidden states": out}, knob, b)


def _update_phase(role: str, knob: str, d: ModelDims, plan: BatchPlan, shards: int, s: int, t: int,
                  lm_head: bool) -> Phase:
    """Forward + backward of one micro-batch. FSDP2 keeps the root group (embeddings, final norm, head)
    and one decoder layer gathered, and with several micro-batches accumulates unsharded gradients
    (gradient sync only after the last one: sharding.FullyShard.set_gradient_sync)."""
    b = plan.micro_batch_responses_per_worker
    parts = {"saved activations": saved_activation_bytes(d, b, s, t, lm_head)}
    if lm_head:
        parts["logits"] = logits_bytes(d, b, s, t)
    if shards > 1:
        parts["gathered root group + one layer"] = FP32 * (d.root_params + d.layer_params)
        if plan.grad_accum_steps > 1:
            parts["unsharded accumulated gradients"] = FP32 * d.params
    return Phase(f"{role} update", parts, knob, b, plan.mini_batch_responses_per_worker)


def _optimizer_phase(role: str, d: ModelDims, shards: int, trained: int | None = None) -> Phase:
    """torch's AdamW (foreach by default on CUDA) materializes sqrt(v) of every trained parameter at once
    (`trained`, default all of them): one fp32 copy during the step (on the CPU its per-tensor loop needs
    only the largest tensor's)."""
    return Phase(f"{role} optimizer step", {"AdamW step temporaries": FP32 * -(-(trained or d.params) // shards)})


# ---- what each pool holds and does ---------------------------------------------------------------

def _dims(path: str, key: str) -> ModelDims:
    from hybridrl.models.loading import readable, resolve_model_path

    with readable(path, key):  # a folder transformers cannot read: one line naming the key
        return read_model_dims(resolve_model_path(path, key))


def _lengths(cfg: RLConfig) -> tuple[int, int]:
    """(S, T): padded sequence and response lengths of every forward after generation."""
    d = cfg.data
    return d.max_prompt_length + d.max_response_length, d.max_response_length


def _generated_per_worker(cfg: RLConfig, world: int) -> int:
    """Responses the busiest worker generates in one call: a round's prompts are split over the
    workers (distributed/group.py shard_rows) and each sampled n times; validation generates about
    VAL_BATCH responses per call."""
    d, r = cfg.data, cfg.actor_rollout_ref.rollout
    train = -(-(d.gen_batch_size or d.train_batch_size) // world) * r.n
    val_prompts = max(1, VAL_BATCH // r.val_kwargs.n)
    return max(train, -(-val_prompts // world) * r.val_kwargs.n if d.val_files else 0)


def _rollout_phase(cfg: RLConfig, d: ModelDims, world: int, shards: int) -> Phase:
    """Generation of min(max_num_seqs, responses per worker) sequences at a time (rollout/hf.py): their
    KV cache at full length, the last position's logits (the prefill asks HF for that one only), and
    the prefill's layer transient. Summed: conservative."""
    r, p = cfg.actor_rollout_ref.rollout, cfg.data.max_prompt_length
    k = min(r.max_num_seqs, _generated_per_worker(cfg, world))
    if r.name == "vllm":  # vLLM's own weights and KV cache are resident (_vllm_engine); only its outputs here
        return Phase("rollout", {"sampled token logits": FP32 * k * d.vocab}, "actor_rollout_ref.rollout.max_num_seqs", k)
    parts = {**_gathered("policy", d, shards), "KV cache": kv_cache_bytes(d, k, p + cfg.data.max_response_length),
             "prefill logits": FP32 * k * d.vocab, "prefill layer transient": forward_transient_bytes(d, k, p)}
    return Phase("rollout", parts, "actor_rollout_ref.rollout.max_num_seqs", k)


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
    from hybridrl.config.validate import critic_batch_plan

    c = cfg.critic
    d = value_model_dims(_dims(c.model.path or cfg.actor_rollout_ref.model.path, "critic.model.path"))
    plan, shards, (s, t) = critic_batch_plan(cfg), _shards(c.strategy, world), _lengths(cfg)
    trained = _critic_lora_trained(cfg, d)  # with LoRA, validate.py refuses sharding over ranks: shards is 1 then
    rows = -(-plan.responses_per_step // world)
    phases = [_forward_phase("critic values", "critic.forward_micro_batch_size_per_gpu", c.forward_micro_batch_size_per_gpu,
                             rows, d, s, t, _gathered("critic", d, shards), lm_head=False),
              _update_phase("critic", "critic.ppo_micro_batch_size_per_gpu", d, plan, shards, s, t, lm_head=False),
              _optimizer_phase("critic", d, shards, trained)]
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
    s, t = _lengths(cfg)
    phase = _forward_phase("reward scoring", "reward_model.micro_batch_size_per_gpu", rm.micro_batch_size_per_gpu,
                           -(-scored // workers), d, s, t, {}, lm_head=False)
    return {"reward model weights": FP32 * d.params}, [phase]


def _policy_parts(cfg: RLConfig, plan: BatchPlan) -> tuple[dict[str, int], tuple[Phase, ...]]:
    """Policy, reference, and (placed with them) critic and in-process reward model of one policy worker."""
    from hybridrl.config.validate import needs_critic, needs_reference

    arr, world, (s, t) = cfg.actor_rollout_ref, plan.world_size, _lengths(cfg)
    d = _dims(arr.model.path, "actor_rollout_ref.model.path")
    shards = _shards(arr.actor.strategy, world)
    adapter = _lora_trained(arr.model, d)
    resident = _lora_trainable("policy", d, adapter) if adapter else _trainable("policy", d, shards)
    phases = [_rollout_phase(cfg, d, world, shards)]
    resident.update(_vllm_engine(cfg, d))
    rows = -(-plan.responses_per_step // world)
    if not plan.on_policy or cfg.algorithm.use_kl_in_reward:  # trainer/rl.py recomputes π_old only then
        phases.append(_forward_phase("policy log-probs", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                                     arr.rollout.log_prob_micro_batch_size_per_gpu, rows, d, s, t,
                                     _gathered("policy", d, shards)))
    if needs_reference(cfg):  # never sharded; with LoRA the policy's own module, adapter off (no copy)
        if not adapter:
            resident["reference weights"] = FP32 * d.params
        phases.append(_forward_phase("reference log-probs", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                                     arr.ref.log_prob_micro_batch_size_per_gpu, rows, d, s, t, {}))
    phases += [_update_phase("policy", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", d, plan, shards, s, t,
                             lm_head=True),
               _optimizer_phase("policy", d, shards, adapter)]
    extras = []
    if needs_critic(cfg) and cfg.critic.n_workers is None:
        extras.append(_critic_parts(cfg, world))
    if cfg.reward_model.enable and cfg.trainer.backend == "local":  # one process holds every role
        extras.append(_reward_parts(cfg, 1))
    for more_resident, more_phases in extras:
        resident.update(more_resident)
        phases += more_phases
    return resident, tuple(phases)


def _processes_per_node(cfg: RLConfig) -> int:
    """Processes sharing one node's RAM: a node's policy workers, the critic pool's share of the nodes
    (all of it when nnodes=1), a node of the reward-model pool, and the driver when it holds the reward model."""
    from hybridrl.config.validate import needs_critic

    tr, rm = cfg.trainer, cfg.reward_model
    if tr.backend == "local":
        return 1
    n = tr.n_gpus_per_node
    if cfg.critic.n_workers is not None and needs_critic(cfg):
        n += -(-cfg.critic.n_workers // tr.nnodes)
    if rm.enable:
        n += max(1, rm.n_gpus_per_node) if rm.enable_resource_pool else 1
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


def estimate_memory(cfg: RLConfig, plan: BatchPlan) -> MemoryReport:
    """Every pool's per-worker estimate (see the module doc); `plan` is the actor's batch plan."""
    from hybridrl.config.validate import needs_critic

    tr, rm = cfg.trainer, cfg.reward_model
    procs = _processes_per_node(cfg)
    pools = [PoolMemory("actor", plan.world_size, *_policy_parts(cfg, plan), *_budget(cfg, tr.device, procs))]
    if needs_critic(cfg) and cfg.critic.n_workers is not None:
        resident, phases = _critic_parts(cfg, cfg.critic.n_workers)
        pools.append(PoolMemory("critic", cfg.critic.n_workers, resident, tuple(phases), *_budget(cfg, tr.device, procs)))
    if rm.enable and tr.backend != "local":
        pooled = rm.enable_resource_pool
        workers = max(1, rm.n_gpus_per_node * rm.nnodes) if pooled else 1
        resident, phases = _reward_parts(cfg, workers)
        # the driver loads the reward model on the CPU (trainer/build.py)
        budget = _budget(cfg, tr.device if pooled else "cpu", procs)
        pools.append(PoolMemory("reward_model" if pooled else "driver (reward model)", workers, resident,
                                tuple(phases), *budget))
    return MemoryReport(tuple(pools))


# ---- the check, and the nearest settings that fit -------------------------------------------------

class MemoryBudgetError(ConfigError):
    """A pool's estimated peak exceeds its budget. `fixes`: override sets (config key -> value), each of
    which makes every pool fit under the same estimate."""

    def __init__(self, message: str, fixes: list[dict[str, Any]]):
        super().__init__(message)
        self.fixes = fixes


def check_memory(cfg: RLConfig, plan: BatchPlan) -> MemoryReport:
    """The estimate, or MemoryBudgetError naming the pool, phase and keys, with settings that fit."""
    report = estimate_memory(cfg, plan)
    over = [p for p in report.pools if p.peak_bytes > p.budget]
    if over:
        from hybridrl.config.memory_fixes import propose_fixes, refusal

        fixes = propose_fixes(cfg, over)
        raise MemoryBudgetError(refusal(over, fixes), fixes)
    return report
