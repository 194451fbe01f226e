"""Typed RL config. Key names and units follow verl (`data.train_batch_size` counts prompts,
`*_micro_batch_size_per_gpu` counts responses per worker), so a verl command line works for
every key we support. Defaults follow verl for algorithm settings; sizes, model, data and
learning rate default to the built-in run (GRPO on arithmetic with the bundled tiny model).

Each field's `doc(...)` text becomes `hybridrl train --help`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hybridrl.config.precision_auto import resolve_auto_precision


def doc(default: Any, text: str, *, ge: Any = None, gt: Any = None, le: Any = None, lt: Any = None,
        also: tuple = (), choices: Optional[tuple[str, ...]] = None, length: Optional[int] = None,
        hint: Optional[str] = None) -> Any:
    """A dataclass field with a default, a one-line help text and the key's valid values, which
    config/constraints.py checks for every command (all violations reported at once):
    `ge`/`gt`/`le`/`lt` bound a number (every element of a list of numbers), `also` lists values
    valid outside those bounds (e.g. -1 for "off"), `choices` the valid strings, `length` the size of
    a list; `hint` ends the error message (what the value means, a usual value). Floats must also be
    finite. null is always valid for an Optional key."""
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "length": length, "hint": hint}
    metadata = {"help": text, **{k: v for k, v in bounds.items() if v is not None}, **({"also": also} if also else {})}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


SEED_MAX = 2 ** 32 - 1  # seeds are mixed into int64 counters (rollout/keyed.py, data/sampler.py)

# valid values of the choice keys; the modules that act on them import them from here
TRUNCATION_MODES = ("error", "left", "right")
WARMUP_STYLES = ("constant", "cosine")
STRATEGIES = ("ddp", "fsdp2", "fsdp")  # fsdp: verl's name, sharded here with FSDP2
ROLLOUT_ENGINES = ("hf", "vllm")
ROLLOUT_DTYPES = ("float32", "bfloat16", "float16", "auto")  # float16: vllm only (config/levers.py); auto: config/precision_auto.py
KL_CTRL_TYPES = ("fixed", "adaptive")
FILTER_METRICS = ("acc", "score", "seq_reward")
ON_ERROR = ("raise", "zero")
REWARD_MANAGERS = ("naive", "batch", "dapo")
RESUME_MODES = ("auto", "disable", "resume_path")
BACKENDS = ("auto", "local", "ray")
DEVICES = ("cpu", "cuda")
LEGACY_WORKER_IMPL = ("auto", "enable", "disable")


@dataclass
class DataConfig:
    train_files: list[str] = doc(["data/arithmetic/train.parquet"], "parquet or jsonl file(s) of training prompts "
                                                                    "(verl schema)")
    val_files: list[str] = doc(["data/arithmetic/val.parquet"], "parquet or jsonl file(s) of validation prompts")
    prompt_key: str = doc("prompt", "column holding the chat messages")
    train_max_samples: int = doc(-1, "use only the first N training rows (-1: all)", ge=1, also=(-1,), hint="(-1: all)")
    val_max_samples: int = doc(-1, "use only the first N validation rows (-1: all)", ge=1, also=(-1,), hint="(-1: all)")
    max_prompt_length: int = doc(64, "longest prompt in tokens, after the chat template", ge=1)
    max_response_length: int = doc(8, "most tokens generated per response", ge=1)
    train_batch_size: int = doc(32, "prompts per training step (each sampled rollout.n times)", ge=1)
    gen_batch_size: Optional[int] = doc(None, "prompts per generation round with algorithm.filter_groups "
                                              "(null: train_batch_size)", ge=1)
    truncation: str = doc("error", "what to do with a prompt over max_prompt_length: error | left | right",
                          choices=TRUNCATION_MODES)
    filter_overlong_prompts: bool = doc(False, "drop prompts over max_prompt_length (the count is logged)")
    shuffle: bool = doc(True, "shuffle the training prompts each epoch")
    seed: int = doc(1, "seed of the training-prompt shuffle", ge=0, le=SEED_MAX)
    reward_fn_key: str = doc("data_source", "column whose value picks the reward scorer")
    skip_bad_rows: bool = doc(False, "skip malformed rows (the count and the first one are logged) instead of "
                                     "stopping at the first")


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
                                   "(config/precision_auto.py)")
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
    warmup_style: str = doc("constant", "schedule after warm-up: constant | cosine", choices=WARMUP_STYLES)
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
    optim: OptimConfig = field(default_factory=OptimConfig)
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
    tensor_model_parallel_size: int = doc(1, "vllm: workers one engine spans (verl's rollout TP); only 1 for now", ge=1)
    lean_decode: bool = doc(True, "hf: decode Llama-family models (qwen2, llama, mistral) with fused projections "
                                  "and no per-call module machinery (same logits); false: the module's own forward "
                                  "with a static KV cache")
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
    cpu_kv_cache_gb: float = doc(1.0, "vllm on CPU: KV-cache size in GiB", gt=0)
    free_cache_engine: bool = doc(True, "vllm on GPU: sleep (free weights and KV cache) between rollouts; the CPU "
                                        "backend has no sleep mode")
    engine_kwargs: EngineKwargs = field(default_factory=lambda: EngineKwargs())
    multi_turn: MultiTurnConfig = field(default_factory=lambda: MultiTurnConfig())


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


@dataclass
class CriticModelConfig:
    path: Optional[str] = doc(None, "causal LM the value model starts from, plus a new scalar head "
                                    "(null: actor_rollout_ref.model.path)")
    lora_rank: int = doc(0, "LoRA rank r of the value model's adapters (0: off, every weight trained); > 0 trains "
                            "only the adapters and the scalar head (needs pip install 'hybridrl[lora]')",
                         ge=0, hint="(0: LoRA off; e.g. 32 turns it on)")
    lora_alpha: float = doc(16.0, "critic LoRA scale: the adapter's update is multiplied by lora_alpha / lora_rank",
                            gt=0, hint="(the update is scaled by lora_alpha / lora_rank; e.g. 16, or twice lora_rank)")
    target_modules: list[str] = doc(["all-linear"], "critic modules that get LoRA adapters: all-linear (every linear "
                                                    "layer but the value head) or a list of names, e.g. [q_proj,v_proj]")
    exclude_modules: list[str] = doc([], "critic module names never adapted, e.g. [down_proj] ([]: none)")
    enable_gradient_checkpointing: bool = doc(False, "activation checkpointing of the value model's update (see "
                                                     "actor_rollout_ref.model.enable_gradient_checkpointing)")
    use_remove_padding: bool = doc(False, "padding-free value and update passes (see "
                                          "actor_rollout_ref.model.use_remove_padding)")
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class CriticConfig:
    """The value model of PPO (algorithm.adv_estimator=gae); unused by critic-free estimators."""

    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    # the actor's optimizer keys; lr defaults to verl's critic lr
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    ppo_mini_batch_size: Optional[int] = doc(None, "prompts per critic optimizer step (null: the actor's)", ge=1)
    ppo_micro_batch_size_per_gpu: Optional[int] = doc(None, "responses per critic forward/backward (null: the largest "
                                                            "divisor of a critic worker's share up to the actor's)",
                                                      ge=1)
    forward_micro_batch_size_per_gpu: Optional[int] = doc(None, "responses per value forward without gradients (null: "
                                                                "256, lowered if the memory estimate needs)", ge=1)
    use_dynamic_bsz: Optional[bool] = doc(None, "form the critic's micro-batches by token count (null: "
                                                "actor_rollout_ref.actor.use_dynamic_bsz)")
    ppo_max_token_len_per_gpu: int = doc(32768, "use_dynamic_bsz: most tokens per critic update micro-batch", ge=1)
    forward_max_token_len_per_gpu: Optional[int] = doc(None, "use_dynamic_bsz: most tokens per value forward (null: "
                                                             "critic.ppo_max_token_len_per_gpu)", ge=1)
    ppo_epochs: Optional[int] = doc(None, "critic passes over each batch (null: the actor's)", ge=1)
    shuffle: bool = doc(False, "shuffle responses before splitting into critic mini-batches")
    cliprange_value: float = doc(0.5, "value clip range: new values stay within old +- cliprange_value",
                                 gt=0, hint="(verl uses 0.5)")
    loss_agg_mode: str = doc("token-mean", "value-loss reduction (same modes as the actor's)")
    grad_clip: float = doc(1.0, "critic max global gradient norm",
                           gt=0, hint="(a norm: <= 0 would flip or zero the gradient)")
    strategy: str = doc("ddp", "critic weights across data-parallel workers: ddp | fsdp2 (see actor.strategy)",
                        choices=STRATEGIES)
    n_workers: Optional[int] = doc(None, "backend=ray: run the critic in its own pool of this many workers "
                                         "(null: in the policy's workers, one rank each)", ge=1)


@dataclass
class KLControlConfig:
    type: str = doc("fixed", "KL-in-reward coefficient: fixed | adaptive (Ziegler et al. 2019)", choices=KL_CTRL_TYPES)
    kl_coef: float = doc(0.001, "KL-in-reward coefficient (the starting value when adaptive)", ge=0)
    target_kl: float = doc(0.1, "adaptive: the KL per token the coefficient steers towards", gt=0)
    horizon: int = doc(10000, "adaptive: responses over which the coefficient may change by +-20%", ge=1)


@dataclass
class FilterGroupsConfig:
    enable: bool = doc(False, "DAPO dynamic sampling: drop groups whose responses all score the same, "
                              "and generate more until data.train_batch_size groups remain")
    metric: str = doc("acc", "what must vary within a group: acc | score (the scorer's value) | seq_reward "
                             "(after reward shaping)", choices=FILTER_METRICS)
    max_num_gen_batches: int = doc(10, "give up after this many generation rounds in one step (0: never)",
                                   ge=0, hint="(0: no limit)")


@dataclass
class AlgorithmConfig:
    adv_estimator: str = doc("grpo", "advantage estimator (see `hybridrl algos`)")
    norm_adv_by_std_in_grpo: bool = doc(True, "divide GRPO advantages by the group std (false: Dr.GRPO)")
    gamma: float = doc(1.0, "discount of token rewards (gae, reinforce_plus_plus)", gt=0, le=1)
    lam: float = doc(1.0, "GAE lambda (gae)", ge=0, le=1)
    use_kl_in_reward: bool = doc(False, "subtract kl_ctrl.kl_coef * KL(policy || reference) from token rewards")
    kl_penalty: str = doc("kl", "KL estimator of the in-reward penalty (see `hybridrl algos`)")
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=lambda: RolloutCorrectionConfig())


@dataclass
class RolloutCorrectionConfig:
    rollout_is: Optional[str] = doc("auto", "importance-weight the policy loss by pi_old / pi_rollout, truncated at "
                                            "rollout_is_threshold, for the engine/trainer mismatch (e.g. bf16 vLLM): "
                                            "token | sequence | null: off | auto: token when rollout.dtype is below "
                                            "float32, else off")
    rollout_is_threshold: float = doc(2.0, "upper bound of the rollout importance weights",
                                      gt=1, hint="(weights are capped there; verl uses 2.0)")
    rollout_rs: Optional[str] = doc(None, "leave out of the loss (and its normaliser) what pi_old / pi_rollout puts "
                                          "outside [rollout_rs_threshold_lower, rollout_rs_threshold]: token | "
                                          "sequence (the product) | geometric (the per-token geometric mean) | null: off")
    rollout_rs_threshold: Optional[float] = doc(None, "upper end of the rejection band (null: rollout_is_threshold; "
                                                      "geometric wants ~1.001)", gt=1)
    rollout_rs_threshold_lower: Optional[float] = doc(None, "lower end of the rejection band (null: 1 / "
                                                            "rollout_rs_threshold)", gt=0, lt=1)


@dataclass
class OverlongBufferConfig:
    enable: bool = doc(False, "DAPO soft overlong punishment of responses near data.max_response_length")
    len: int = doc(4, "the last `len` tokens before data.max_response_length are the punished buffer", ge=1)
    penalty_factor: float = doc(1.0, "penalty at max_response_length; it grows linearly over the buffer", ge=0)


@dataclass
class RewardModelModelConfig:
    path: Optional[str] = doc(None, "HF *ForSequenceClassification reward model folder (reward_model.enable=true)")


@dataclass
class RewardModelConfig:
    enable: bool = doc(False, "score responses with a reward model (reward_model.model.path)")
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size_per_gpu: int = doc(64, "responses per reward-model forward", ge=1)
    rm_weight: float = doc(1.0, "with a reward model: score = rm_weight * model score + rule_weight * rule score", ge=0)
    rule_weight: float = doc(0.0, "with a reward model: weight of the rule/custom score (0: rule scorers not called, "
                                  "rows need no ground truth)", ge=0)
    num_workers: int = doc(2, "processes that run the rule/custom scorers (0: in the trainer process, where timeout_s "
                              "interrupts a scorer by SIGALRM)", ge=0, hint="(0: score in the trainer process)")
    timeout_s: float = doc(30.0, "seconds one response's scorer (a batched function: its one call) may run before it is "
                                 "stopped and counted as failed; a batch ends within ~timeout_s of its first hang",
                           gt=0, hint="seconds")
    on_error: str = doc("raise", "a scorer that raises, times out or returns NaN/inf: raise (stop, naming the sample) "
                                 "| zero (score 0, counted in reward/errors)", choices=ON_ERROR)
    reward_manager: str = doc("naive", "how the reward function is called: naive (per sample) | batch (once per "
                                       "batch with lists) | dapo (naive; the overlong buffer works with any)",
                              choices=REWARD_MANAGERS)
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    enable_resource_pool: bool = doc(False, "backend=ray: score with the reward model in its own pool of "
                                            "reward_model.n_gpus_per_node * reward_model.nnodes workers (false: in the "
                                            "driver process)")
    n_gpus_per_node: int = doc(0, "reward-model workers per node (enable_resource_pool=true)", ge=0)
    nnodes: int = doc(0, "nodes of the reward-model pool (enable_resource_pool=true)", ge=0)


@dataclass
class CustomRewardFunctionConfig:
    path: Optional[str] = doc(None, "Python file with a verl-style reward function, used for every data_source "
                                    "(null: the built-in scorers)")
    name: str = doc("compute_score", "the function's name in that file")


@dataclass
class TrainerConfig:
    project_name: str = doc("hybridrl", "project name (run folder, loggers)")
    experiment_name: str = doc("arithmetic_grpo", "experiment name (run folder, loggers)")
    logger: list[str] = doc(["console", "file"], "loggers: console (compact line per step), file (metrics.jsonl, "
                                                 "always on), tensorboard (<run folder>/tensorboard), wandb (WANDB_MODE="
                                                 "offline works), mlflow (MLFLOW_TRACKING_URI, else <run folder>/mlruns)")
    log_val_generations: int = doc(0, "log this many validation generations (prompt, response, score) to the loggers "
                                      "at every validation; the same prompts each time", ge=0)
    rollout_data_dir: Optional[str] = doc(None, "write every training generation to <dir>/<step>.jsonl (null: off)")
    validation_data_dir: Optional[str] = doc(None, "write every validation generation to <dir>/<step>.jsonl (null: off)")
    dump_token_details: bool = doc(False, "rollout_data_dir rows also get per-token lists: the token text, the engine's "
                                          "log-prob, the trainer's log-prob before the update (one extra log-prob pass "
                                          "per step unless the run computes pi_old anyway) and their probability gap, the entropy of pi_old at "
                                          "each token (same forward), and which tokens are trained on "
                                          "(hybridrl view colours tokens by them)")
    total_epochs: int = doc(1, "passes over the training prompts", ge=1)
    total_training_steps: Optional[int] = doc(100, "stop after this many steps (null: total_epochs decides)", ge=1)
    test_freq: int = doc(10, "validate every N steps and at the last one; -1: never, as in verl (val_before_train aside)",
                         ge=-1, hint="(N > 0: every N steps and the last; -1 or 0: never)")
    val_before_train: bool = doc(True, "validate before the first step")
    default_local_dir: str = doc("checkpoints/${trainer.project_name}/${trainer.experiment_name}",
                                 "run folder: metrics.jsonl, config.yaml, global_step_<N>/ checkpoints")
    save_freq: int = doc(-1, "save a checkpoint every N steps and at the last step (-1: only at the last step; "
                             "0: never)",
                         ge=-1, hint="(N > 0: every N steps and the last; -1: the last step only; 0: never)")
    max_actor_ckpt_to_keep: Optional[int] = doc(None, "keep the newest N checkpoints (null: all)",
                                                ge=1, hint="(null keeps all)")
    max_critic_ckpt_to_keep: Optional[int] = doc(None, "keep the critic of the newest N checkpoints (null: all)",
                                                 ge=1, hint="(null keeps all)")
    resume_mode: str = doc("auto", "auto (the newest whole checkpoint in default_local_dir, else start) | disable "
                                   "(start over) | resume_path (trainer.resume_from_path)", choices=RESUME_MODES)
    resume_from_path: Optional[str] = doc(None, "the global_step_<N> folder to resume from (resume_mode=resume_path)")
    resume_allow_config_change: bool = doc(False, "resume even if keys that change results differ from the checkpoint's")
    n_gpus_per_node: int = doc(1, "workers per node (data-parallel ranks; with backend=local: 1)", ge=1)
    nnodes: int = doc(1, "nodes (with backend=ray)", ge=1)
    backend: str = doc("auto", "local (every role in this process) | ray (n_gpus_per_node * nnodes worker processes, "
                               "each holding the policy, reference and critic of one data-parallel rank) | auto (ray "
                               "when n_gpus_per_node * nnodes > 1, else local)", choices=BACKENDS)
    device: str = doc("cpu", "where models run: cpu | cuda (one GPU per worker; NCCL between workers)", choices=DEVICES)
    memory_per_worker_gb: Optional[float] = doc(None, "memory one worker may use, for `hybridrl plan`'s check (null: "
                                                      "this machine's RAM / workers per node on cpu, the GPU's memory "
                                                      "on cuda)", gt=0)
    worker_timeout_s: float = doc(600.0, "backend=ray: a remote call or collective that runs longer stops the run, "
                                         "naming the phase, role and rank, with the stuck worker's stack", gt=0)
    seed: int = doc(1, "seed of sampling during rollouts", ge=0, le=SEED_MAX)
    critic_warmup: int = doc(0, "the first N steps update only the critic (algorithm.adv_estimator=gae)", ge=0)
    use_legacy_worker_impl: str = doc("auto", "verl's switch between its two worker implementations: auto | enable | "
                                              "disable; hybridrl has one, so every value trains the same",
                                      choices=LEGACY_WORKER_IMPL, hint="(all train the same here)")


@dataclass
class RayInitConfig:
    address: Optional[str] = doc(None, "join this Ray cluster (e.g. auto, or ray://host:10001); null: start a local one")
    num_cpus: Optional[int] = doc(None, "CPUs of the local cluster Ray starts (null: all of this machine's)", ge=1)


@dataclass
class RayKwargsConfig:
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)


@dataclass
class TeacherModelConfig:
    model_path: Optional[str] = doc(None, "HF folder of the frozen teacher that scores the student's samples "
                                          "(distillation.enabled=true); its tokenizer must equal the policy's")


@dataclass
class DistillationLossConfig:
    loss_mode: str = doc("k3+", "per-token estimator of KL(student || teacher) on the student's samples (a KL "
                                "estimator, see `hybridrl algos`); as a loss: k3+ / k1+ / k2 (the reverse KL's "
                                "gradient; k3+: k3's value), k3 (verl's default; its gradient is the forward KL's), "
                                "k1 refused; as a reward (use_policy_gradient=true): k1")
    distillation_loss_coef: float = doc(1.0, "weight of the distillation loss added to the actor loss", ge=0)
    use_task_rewards: bool = doc(True, "keep the reward's advantages in the actor loss (false: pure distillation; "
                                       "rewards are still scored and logged, their advantages set to 0)")
    use_policy_gradient: bool = doc(False, "the estimate (detached) is a per-token advantage -k_t of the actor's policy "
                                           "loss, as Thinking Machines (use k1); false: backpropagated as a loss (GKD). "
                                           "verl's default is true")


@dataclass
class DistillationConfig:
    """verl's `distillation` section (on-policy distillation, docs/algorithms.md): a frozen teacher
    scores the student's own samples and the actor loss adds their per-token KL."""

    enabled: bool = doc(False, "on-policy distillation from distillation.teacher_model.model_path")
    enable_resource_pool: bool = doc(False, "backend=ray: the teacher in its own pool of distillation.n_gpus_per_node * "
                                            "distillation.nnodes workers (false: rank r beside the policy's rank r)")
    n_gpus_per_node: int = doc(0, "teacher workers per node (enable_resource_pool=true)", ge=0)
    nnodes: int = doc(0, "nodes of the teacher pool (enable_resource_pool=true)", ge=0)
    teacher_model: TeacherModelConfig = field(default_factory=TeacherModelConfig)
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)


@dataclass
class RLConfig:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)

    def __post_init__(self) -> None:
        # `auto` precision keys -> concrete values for this machine, before anything reads them
        self.auto_notes = resolve_auto_precision(self)  # `key=value (auto: why)` lines for `hybridrl plan`
