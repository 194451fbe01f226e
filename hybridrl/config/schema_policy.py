"""The policy's config sections: `actor_rollout_ref.{model, actor, rollout, ref}` (verl's names and units)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hybridrl.config.fields import AGENT_ON_ERROR, ROLLOUT_DTYPES, ROLLOUT_ENGINES, STRATEGIES, WARMUP_STYLES, doc

@dataclass
class ModelConfig:
    path: str = doc("tiny-arith", "HuggingFace model folder, or the name of a bundled model (tiny-arith)")
    share_prompt_prefix: bool = doc(True, "run each distinct prompt's forward once per micro-batch and let its "
                                          "responses attend to its keys and values (log-prob, reference and update "
                                          "passes, hf rollout prefill): the same log-probs and gradients up to "
                                          "rounding, with (n-1)/n of the prompt FLOPs saved")
    lora_rank: int = doc(0, "LoRA rank r of the policy's adapters (0: off, every weight trained); > 0 trains only "
                            "the adapters (needs pip install 'hybridrl[lora]'), the reference is the base model",
                         ge=0, hint="(0: LoRA off; e.g. 32 turns it on)")
    lora_alpha: float = doc(16.0, "LoRA scale: the adapter's update is multiplied by lora_alpha / lora_rank",
                            gt=0, hint="(the update is scaled by lora_alpha / lora_rank; e.g. 16, or twice lora_rank)")
    target_modules: list[str] = doc(["all-linear"], "modules that get LoRA adapters: all-linear (every linear layer "
                                                    "but the LM head) or a list of names, e.g. [q_proj,v_proj]")
    exclude_modules: list[str] = doc([], "module names never adapted, e.g. [down_proj] ([]: none)")
    lora_adapter_path: Optional[str] = doc(None, "continue training this peft adapter folder (adapter_config.json; its "
                                                 "rank and alpha must match lora_rank and lora_alpha; null: new adapters)")
    enable_gradient_checkpointing: bool = doc(False, "activation checkpointing: keep only each decoder layer's input in "
                                                     "the update's forward and recompute the layer in backward (the "
                                                     "same gradients, about a third more compute, far less memory)")
    use_remove_padding: bool = doc(False, "padding-free forwards: the log-prob, reference and update passes pack a "
                                          "micro-batch's real tokens into rows with attention that never crosses "
                                          "sequences (no compute on pad tokens; the same log-probs and gradients)")


@dataclass
class MixedPrecisionConfig:
    """verl's fsdp_config.mixed_precision: the dtypes of compute and of gradient reduction (models/precision.py)."""

    param_dtype: str = doc("auto", "compute dtype of forwards and backwards: fp32 | bf16 (bf16 autocast over fp32 "
                                   "master weights; on a CPU fast only with AVX512-BF16 or AMX, see hybridrl doctor) "
                                   "| auto: bf16 where the hardware has fast bf16, else fp32 "
                                   "(plan/precision_auto.py)")
    reduce_dtype: str = doc("fp32", "dtype gradients are summed in across data-parallel workers: fp32 | bf16")
    buffer_dtype: str = doc("fp32", "dtype of the model's buffers (rotary frequencies): fp32 (the only value: bf16 "
                                    "positions lose precision)")


@dataclass
class FSDPConfig:
    """verl's fsdp_config of a trained role (the policy's, the critic's): precision and offload."""

    param_offload: bool = doc(False, "trainer.device=cuda: keep the parameters, gradients and AdamW state in host "
                                     "memory, moved to the GPU per layer as needed (FSDP2's CPU offload; needs "
                                     "strategy fsdp2); no effect with trainer.device=cpu")
    optimizer_offload: bool = doc(False, "trainer.device=cuda: keep the AdamW moments in host memory between "
                                         "optimizer steps; no effect with trainer.device=cpu")
    model_dtype: str = doc("fp32", "dtype the trained weights and AdamW state are kept in: fp32 (master weights; bf16 "
                                   "compute is mixed_precision.param_dtype)")
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)


@dataclass
class RefMixedPrecisionConfig:
    param_dtype: Optional[str] = doc(None, "compute dtype of the reference's forwards: fp32 | bf16 (null: the actor's "
                                           "mixed_precision.param_dtype, so both log-probs are taken alike)")


@dataclass
class RefFSDPConfig:
    """verl's actor_rollout_ref.ref.fsdp_config: the frozen reference's precision and offload."""

    param_offload: bool = doc(False, "trainer.device=cuda: keep the reference's weights in host memory and move them "
                                     "to the GPU only for its log-prob pass; no effect with trainer.device=cpu")
    model_dtype: str = doc("fp32", "dtype the reference's weights are kept in: fp32 | bf16 (half the memory; needs "
                                   "bf16 compute)")
    mixed_precision: RefMixedPrecisionConfig = field(default_factory=RefMixedPrecisionConfig)


@dataclass
class OptimConfig:
    lr: float = doc(2e-4, "peak learning rate of AdamW", gt=0)
    weight_decay: float = doc(0.01, "AdamW weight decay", ge=0)
    betas: list[float] = doc([0.9, 0.999], "AdamW betas",
                             ge=0, lt=1, length=2, hint="(AdamW's beta1, beta2; e.g. [0.9, 0.999])")
    lr_warmup_steps: int = doc(-1, "linear warm-up steps; -1 uses lr_warmup_steps_ratio",
                               ge=0, also=(-1,), hint="(-1: lr_warmup_steps_ratio decides)")
    lr_warmup_steps_ratio: float = doc(0.0, "warm-up steps as a fraction of total training steps", ge=0, le=1)
    warmup_style: str = doc("constant", "schedule after warm-up: constant | cosine (down to min_lr_ratio * lr at the "
                                        "last step). The actor's default is cosine: at a constant lr the bundled "
                                        "run's greedy accuracy kept wandering +-5-10 points to its last step, decayed "
                                        "it settles (bench/default_run.py); verl's and the critic's: constant",
                            choices=WARMUP_STYLES)
    min_lr_ratio: float = doc(0.0, "cosine schedule floor as a fraction of lr", ge=0, le=1)


@dataclass
class PolicyLossConfig:
    loss_mode: str = doc("vanilla", "policy loss: vanilla | gspo | cispo | gpg | sapo (see `hybridrl algos`)")


@dataclass
class ActorConfig:
    ppo_mini_batch_size: int = doc(32, "prompts per optimizer step (times rollout.n responses)", ge=1)
    ppo_micro_batch_size_per_gpu: Optional[int] = doc(None, "responses per forward/backward on one worker (null: "
                                                            "derived, the largest divisor of a worker's mini-batch "
                                                            "share up to 128, lowered if the memory estimate needs; "
                                                            "`hybridrl plan` shows it)", ge=1)
    ppo_epochs: int = doc(1, "passes over each training batch", ge=1)
    shuffle: bool = doc(False, "shuffle responses before splitting into mini-batches")
    clip_ratio: float = doc(0.2, "PPO clip range epsilon", gt=0)
    clip_ratio_low: Optional[float] = doc(None, "lower clip range (default: clip_ratio)", gt=0)
    clip_ratio_high: Optional[float] = doc(None, "upper clip range (default: clip_ratio; DAPO clip-higher)", gt=0)
    clip_ratio_c: float = doc(3.0, "dual-clip bound for negative advantages (Ye et al. 2020); must be > 1",
                              gt=1, hint="(verl uses 3.0)")
    tau_pos: float = doc(1.0, "SAPO gate temperature for positive advantages", gt=0)
    tau_neg: float = doc(1.05, "SAPO gate temperature for negative advantages", gt=0)
    loss_agg_mode: str = doc("token-mean", "loss reduction: token-mean | token-sum | seq-mean-token-sum | "
                                           "seq-mean-token-mean | seq-mean-token-sum-norm")
    loss_scale_factor: Optional[float] = doc(None, "seq-mean-token-sum-norm's length constant (null: data.max_response_length)",
                                             gt=0)
    entropy_coeff: float = doc(0.0, "entropy bonus coefficient",
                               ge=0, hint="(a bonus: the loss subtracts entropy_coeff * entropy)")
    use_kl_loss: bool = doc(False, "add a KL(policy || reference) term to the loss")
    kl_loss_coef: float = doc(0.001, "coefficient of the KL loss", ge=0)
    kl_loss_type: str = doc("low_var_kl", "KL estimator of the KL loss: kl | abs | mse | low_var_kl, a '+' suffix "
                                          "for k2's gradient (see `hybridrl algos`)")
    grad_clip: float = doc(1.0, "max global gradient norm", gt=0, hint="(a norm: <= 0 would flip or zero the gradient)")
    skip_zero_advantage: bool = doc(True, "leave responses whose advantage is 0 on every token (a GRPO group with "
                                          "equal rewards) out of the update's forward/backward and of the old "
                                          "log-prob pass; the loss normaliser still counts them, so the update is "
                                          "unchanged. Only where exact: no entropy bonus, no KL loss (else they stay; "
                                          "`hybridrl plan` says so). actor/entropy, pg_clipfrac and ppo_kl are then "
                                          "means over the responses the update computed (a mini-batch with none: "
                                          "over all of them, from a forward without gradients)")
    strategy: str = doc("ddp", "how data-parallel workers hold the weights: ddp (a full copy each, gradients summed "
                               "with one all-reduce) | fsdp2 (parameters, gradients and AdamW state sharded with "
                               "torch's fully_shard; fsdp is accepted as the same)", choices=STRATEGIES)
    use_dynamic_bsz: bool = doc(False, "form update micro-batches by token count (ppo_max_token_len_per_gpu) instead of "
                                       "ppo_micro_batch_size_per_gpu, balanced across micro-batches and workers; the "
                                       "same update (the loss is normalised over the whole mini-batch)")
    ppo_max_token_len_per_gpu: int = doc(16384, "use_dynamic_bsz: most tokens (prompt + response) in one update "
                                                "micro-batch on one worker; at least the longest sequence", ge=1)
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    # cosine to 0, not verl's constant: the default run's last steps settle instead of wandering (see warmup_style)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(warmup_style="cosine"))
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class ValKwargs:
    n: int = doc(1, "samples per validation prompt", ge=1)
    do_sample: bool = doc(False, "sample at validation (false: greedy)")
    temperature: float = doc(0.0, "validation temperature (used when do_sample)", ge=0)
    top_p: float = doc(1.0, "validation nucleus sampling", gt=0, le=1)
    top_k: int = doc(-1, "validation top-k (-1: off)", ge=1, also=(-1,), hint="(-1: off)")


@dataclass
class EngineKwargs:
    vllm: dict = doc({}, "extra vllm.LLM(...) arguments, passed as they are (e.g. {swap_space: 2})")


@dataclass
class MultiTurnConfig:
    """Tool-using rollouts (rollout/multi_turn.py): model and tool turns alternate in one response."""

    enable: bool = doc(False, "multi-turn rollouts: the model may call the tools of tool_config_path (Hermes "
                              "<tool_call> JSON) and reads their answers before going on")
    max_assistant_turns: int = doc(5, "most model turns per response (a call in the last one is not run)", ge=1)
    tool_config_path: Optional[str] = doc(None, "YAML file listing the tools (verl's layout: tools: [{class_name, "
                                                "config, tool_schema}]); built-ins: calculator, python")
    max_tool_response_length: int = doc(256, "characters of a tool's answer shown to the model (the rest is cut)", ge=1)


@dataclass
class AgentConfig:
    """Agent rollouts (docs/agents.md): the user's `async def agent(client, row)` talks to the policy through an
    OpenAI-compatible proxy on loopback; every chat completion it asks for is generated by the rollout engine and
    its trajectory is one training row (trainer/agent_source.py)."""

    path: Optional[str] = doc(None, "Python file defining the agent, `async def agent(client, row) -> float | dict` "
                                    "(null: no agent; the engine answers the dataset prompts itself)")
    name: str = doc("agent", "name of the agent function in path")
    timeout_s: float = doc(300.0, "seconds one agent may spend in a step outside its chat completions (its own code "
                                  "and tools; a completion's wait for the policy is not counted); then it is "
                                  "cancelled, its row gets reward 0 and no training signal (agent/timeouts)", gt=0)
    max_turns: int = doc(8, "most chat completions one agent may ask for in a step; the next one is refused with an "
                            "HTTP 400 (agent/limit_hits)", ge=1)
    max_tokens: Optional[int] = doc(None, "most tokens the policy generates for one agent over all its turns "
                                          "(null: data.max_response_length); then requests get a 400", ge=1)
    on_error: str = doc("zero", "an agent that raises: zero (its row gets reward 0 and no training signal, counted in "
                                "agent/errors) | fail (the step stops, naming the agent, its row and the error)",
                        choices=AGENT_ON_ERROR)


@dataclass
class RolloutConfig:
    name: str = doc("hf", "rollout engine: hf (in-process HuggingFace module, shares the policy's weights) | vllm "
                          "(a colocated vLLM engine, weights synced after every update; `make vllm` on CPU)",
                    choices=ROLLOUT_ENGINES)
    n: int = doc(8, "responses sampled per prompt", ge=1)
    temperature: float = doc(1.0, "sampling temperature", ge=0)
    top_p: float = doc(1.0, "nucleus sampling probability mass", gt=0, le=1)
    top_k: int = doc(-1, "top-k sampling (-1: off)", ge=1, also=(-1,), hint="(-1: off)")
    do_sample: bool = doc(True, "sample (false: greedy)")
    ignore_eos: bool = doc(False, "training rollouts run to data.max_response_length, EOS sampled like any token "
                                  "(fixed work per step, for benchmarks); validation still stops at EOS")
    log_prob_micro_batch_size_per_gpu: Optional[int] = doc(None, "responses per log-prob forward on one worker (null: "
                                                                 "256, lowered if the memory estimate needs)", ge=1)
    log_prob_use_dynamic_bsz: Optional[bool] = doc(None, "form the policy's log-prob micro-batches by token count "
                                                         "(null: actor.use_dynamic_bsz)")
    log_prob_max_token_len_per_gpu: Optional[int] = doc(None, "log_prob_use_dynamic_bsz: most tokens per log-prob "
                                                              "micro-batch (null: actor.ppo_max_token_len_per_gpu)",
                                                        ge=1)
    tensor_model_parallel_size: int = doc(1, "vllm with trainer.backend=ray: consecutive workers of a node one engine "
                                             "spans (verl's rollout TP; a divisor of trainer.n_gpus_per_node)", ge=1)
    lean_decode: bool = doc(True, "hf: decode Llama-family models (qwen2, llama, mistral) with fused projections "
                                  "and no per-call module machinery (same logits); false: the module's own forward "
                                  "with a static KV cache")
    pack_weights: bool = doc(True, "hf + lean_decode on an x86 CPU: after 8 decode steps, reorder the projection "
                                   "weights into oneDNN's blocked layout and multiply by them there (bf16: the same "
                                   "logits, ~10 % faster generation; fp32: ~25 % faster on AVX-512, logits within "
                                   "float rounding, ~3e-6 relative, of the plain matmul's; bf16 weights only on a CPU "
                                   "with avx512bw+vl+dq or avx_ne_convert, plain elsewhere); false: plain matmuls")
    max_num_seqs: int = doc(1024, "most responses one worker generates at once (bounds the KV cache); more are "
                                  "generated in chunks with the same samples", ge=1)
    val_kwargs: ValKwargs = field(default_factory=ValKwargs)
    dtype: str = doc("auto", "dtype of generation: float32 (the rollout log-probs are the trainer's) | bfloat16 "
                             "(faster where bf16 is; see algorithm.rollout_correction) | vllm also float16 | auto: "
                             "the actor's compute dtype (mixed_precision.param_dtype)",
                     choices=ROLLOUT_DTYPES)
    enforce_eager: bool = doc(True, "vllm: no CUDA graphs / compilation (faster start-up, same samples)")
    gpu_memory_utilization: float = doc(0.5, "vllm on GPU: the share of GPU memory for vLLM's weights and KV cache",
                                        gt=0, le=1)
    cpu_kv_cache_gb: float = doc(1.0, "vllm on CPU: KV-cache size in GiB, of each worker's engine", gt=0)
    free_cache_engine: bool = doc(True, "vllm on GPU: sleep (free weights and KV cache) between rollouts; the CPU "
                                        "backend has no sleep mode")
    engine_kwargs: EngineKwargs = field(default_factory=lambda: EngineKwargs())
    multi_turn: MultiTurnConfig = field(default_factory=lambda: MultiTurnConfig())
    agent: AgentConfig = field(default_factory=lambda: AgentConfig())


@dataclass
class RefConfig:
    log_prob_micro_batch_size_per_gpu: Optional[int] = doc(None, "responses per reference log-prob forward (null: 256, "
                                                                 "lowered if the memory estimate needs)", ge=1)
    log_prob_use_dynamic_bsz: Optional[bool] = doc(None, "form the reference's micro-batches by token count (null: "
                                                         "actor.use_dynamic_bsz)")
    log_prob_max_token_len_per_gpu: Optional[int] = doc(None, "log_prob_use_dynamic_bsz: most tokens per reference "
                                                              "micro-batch (null: actor.ppo_max_token_len_per_gpu)",
                                                        ge=1)
    fsdp_config: RefFSDPConfig = field(default_factory=RefFSDPConfig)


@dataclass
class ActorRolloutRefConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)
