"""The scale levers of a config (verl's keys): precision, activation checkpointing, padding-free
packing, token-budget micro-batches and offload. Checks of their values, and the effective setting
of each pass where a key defaults to another one (`null: the actor's`), computed once here so the
roles never resolve a default themselves.
"""

from __future__ import annotations

from typing import Optional

from hybridrl.batching import MicroBatching  # noqa: F401  re-exported
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError, messages_of, raise_all

# verl's PrecisionType spellings; fp16 is refused below (it needs loss scaling, which no trainer here does)
DTYPE_NAMES = {"fp32": "fp32", "float32": "fp32", "32": "fp32", "bf16": "bf16", "bfloat16": "bf16"}
FP16_NAMES = ("fp16", "float16", "half", "16")


def dtype_name(key: str, value: object) -> str:
    """'fp32' or 'bf16' for any spelling verl accepts; a ConfigError naming the key otherwise."""
    text = str(value).lower()
    if text in DTYPE_NAMES:
        return DTYPE_NAMES[text]
    if text == "auto":  # plan.resolve is the one place `auto` becomes this machine's dtype (plan/precision_auto.py)
        raise ConfigError(f"{key}=auto has not been resolved: a config reaches the roles through hybridrl.plan.resolve "
                          "(hybridrl.plan.resolve.resolve(cfg), or load_run_plan), which picks the dtype")
    if text in FP16_NAMES:
        raise ConfigError(f"{key}={value}: fp16 training needs loss scaling, which hybridrl does not do; use bf16 "
                          "(the same memory, fp32's exponent range, no scaling) or fp32")
    raise ConfigError(f"{key}={value!r} is not a dtype hybridrl trains with; valid values: fp32 (float32), "
                      "bf16 (bfloat16)")


def _pick(own, default):
    return default if own is None else own


def actor_update_batching(cfg: RLConfig, micro_batch_size: int) -> MicroBatching:
    a = cfg.actor_rollout_ref.actor
    return MicroBatching(micro_batch_size, a.ppo_max_token_len_per_gpu if a.use_dynamic_bsz else None)


def _log_prob_pass(section, actor) -> MicroBatching:
    """A no-gradient log-prob pass configured by `section` (rollout or ref): its own log_prob_* keys, each
    null one falling back to the actor's, as verl's config does."""
    dynamic = _pick(section.log_prob_use_dynamic_bsz, actor.use_dynamic_bsz)
    return MicroBatching(section.log_prob_micro_batch_size_per_gpu,
                         _pick(section.log_prob_max_token_len_per_gpu, actor.ppo_max_token_len_per_gpu) if dynamic else None)


def log_prob_batching(cfg: RLConfig) -> MicroBatching:
    """The policy's no-gradient log-prob pass (π_old)."""
    return _log_prob_pass(cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor)


def ref_batching(cfg: RLConfig) -> MicroBatching:
    """The reference's log-prob pass."""
    return _log_prob_pass(cfg.actor_rollout_ref.ref, cfg.actor_rollout_ref.actor)


def critic_update_batching(cfg: RLConfig, micro_batch_size: int) -> MicroBatching:
    c = cfg.critic
    dynamic = _pick(c.use_dynamic_bsz, cfg.actor_rollout_ref.actor.use_dynamic_bsz)
    return MicroBatching(micro_batch_size, c.ppo_max_token_len_per_gpu if dynamic else None)


def critic_values_batching(cfg: RLConfig) -> MicroBatching:
    c = cfg.critic
    dynamic = _pick(c.use_dynamic_bsz, cfg.actor_rollout_ref.actor.use_dynamic_bsz)
    return MicroBatching(c.forward_micro_batch_size_per_gpu,
                         _pick(c.forward_max_token_len_per_gpu, c.ppo_max_token_len_per_gpu) if dynamic else None)


def resolve_backend(cfg: RLConfig) -> None:
    """trainer.backend=auto: ray when the config asks for several workers (verl's trainer.n_gpus_per_node=8
    alone means eight workers), else local. Resolved once, in place, before anything reads it."""
    tr = cfg.trainer
    if tr.backend == "auto":
        tr.backend = "ray" if tr.n_gpus_per_node * tr.nnodes > 1 else "local"


def _check_token_budgets(cfg: RLConfig, needs_critic: bool, needs_reference: bool) -> None:
    """A token budget must hold the longest sequence (verl asserts the same): one sequence is never split."""
    d = cfg.data
    longest = d.max_prompt_length + d.max_response_length
    budgets = [("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", actor_update_batching(cfg, 1)),
               ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", log_prob_batching(cfg))]
    if needs_reference:
        budgets.append(("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", ref_batching(cfg)))
    if needs_critic:
        budgets += [("critic.ppo_max_token_len_per_gpu", critic_update_batching(cfg, 1)),
                    ("critic.forward_max_token_len_per_gpu", critic_values_batching(cfg))]
    for key, batching in budgets:
        if batching.dynamic and batching.max_tokens < longest:
            raise ConfigError(
                f"{key}={batching.max_tokens} (in effect) is smaller than one sequence of data.max_prompt_length + "
                f"data.max_response_length = {longest} tokens, and a sequence is never split; set it to at least "
                f"{longest} (verl's default is 16384 for the actor)")


def _check_precision(cfg: RLConfig) -> None:
    arr = cfg.actor_rollout_ref
    sections = [("actor_rollout_ref.actor.fsdp_config", arr.actor.fsdp_config),
                ("critic.model.fsdp_config", cfg.critic.model.fsdp_config)]
    for key, f in sections:
        dtype_name(f"{key}.mixed_precision.param_dtype", f.mixed_precision.param_dtype)
        dtype_name(f"{key}.mixed_precision.reduce_dtype", f.mixed_precision.reduce_dtype)
        if dtype_name(f"{key}.mixed_precision.buffer_dtype", f.mixed_precision.buffer_dtype) != "fp32":
            raise ConfigError(f"{key}.mixed_precision.buffer_dtype={f.mixed_precision.buffer_dtype}: buffers (the "
                              "rotary frequencies) stay fp32 here, as bf16 positions lose precision and FSDP2 has no "
                              "buffer dtype; remove the key or set it to fp32")
        if dtype_name(f"{key}.model_dtype", f.model_dtype) != "fp32":
            raise ConfigError(f"{key}.model_dtype={f.model_dtype}: trained weights and their AdamW state stay fp32 "
                              "(master weights: updates of lr=1e-6 vanish when added to bf16 weights); for bf16 "
                              f"compute set {key}.mixed_precision.param_dtype=bf16")
    ref = arr.ref.fsdp_config
    stored = dtype_name("actor_rollout_ref.ref.fsdp_config.model_dtype", ref.model_dtype)
    compute = ref_compute_dtype(cfg)
    if stored == "bf16" and compute == "fp32":
        raise ConfigError("actor_rollout_ref.ref.fsdp_config.model_dtype=bf16 keeps the reference's weights in bf16, "
                          "so it computes in bf16, but its mixed_precision.param_dtype is fp32 (in effect); set "
                          "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16 (or the actor's)")
    r = arr.rollout
    if r.name == "hf" and r.dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"actor_rollout_ref.rollout.dtype={r.dtype!r} with the hf engine: use float32 or bfloat16 "
                          "(float16 is vLLM's)")


def ref_compute_dtype(cfg: RLConfig) -> str:
    """'fp32' or 'bf16': the reference's own mixed_precision.param_dtype, else the actor's."""
    arr = cfg.actor_rollout_ref
    own = arr.ref.fsdp_config.mixed_precision.param_dtype
    if own is not None:
        return dtype_name("actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype", own)
    return dtype_name("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
                      arr.actor.fsdp_config.mixed_precision.param_dtype)


def actor_dtypes(cfg: RLConfig) -> tuple[str, str]:
    """(compute, reduce) dtype names of the policy's forwards and gradient sums: 'fp32' | 'bf16'."""
    key = "actor_rollout_ref.actor.fsdp_config.mixed_precision"
    mp = cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision
    return dtype_name(f"{key}.param_dtype", mp.param_dtype), dtype_name(f"{key}.reduce_dtype", mp.reduce_dtype)


def critic_dtypes(cfg: RLConfig) -> tuple[str, str]:
    """(compute, reduce) dtype names of the critic's forwards and gradient sums."""
    key = "critic.model.fsdp_config.mixed_precision"
    mp = cfg.critic.model.fsdp_config.mixed_precision
    return dtype_name(f"{key}.param_dtype", mp.param_dtype), dtype_name(f"{key}.reduce_dtype", mp.reduce_dtype)


def ref_model_dtype(cfg: RLConfig) -> str:
    """'fp32' | 'bf16': the dtype the frozen reference's weights are loaded in."""
    return dtype_name("actor_rollout_ref.ref.fsdp_config.model_dtype", cfg.actor_rollout_ref.ref.fsdp_config.model_dtype)


def rollout_compute_dtype(cfg: RLConfig) -> str:
    """'fp32' | 'bf16': the hf engine's generation dtype (rollout.dtype; vllm reads the key itself)."""
    return dtype_name("actor_rollout_ref.rollout.dtype", cfg.actor_rollout_ref.rollout.dtype)


def _check_checkpointing(cfg: RLConfig) -> None:
    """HF's checkpointed decoder layers drop past_key_values in training, which the padded prompt-sharing
    forward (models/forward.prefill_distinct) feeds the responses with: their log-probs would be wrong."""
    m = cfg.actor_rollout_ref.model
    if m.enable_gradient_checkpointing and m.share_prompt_prefix and not m.use_remove_padding:
        raise ConfigError("actor_rollout_ref.model.enable_gradient_checkpointing=true does not work with the padded "
                          "prompt sharing (actor_rollout_ref.model.share_prompt_prefix=true, use_remove_padding=false);"
                          " set actor_rollout_ref.model.share_prompt_prefix=false or "
                          "actor_rollout_ref.model.use_remove_padding=true")


def _check_offload(cfg: RLConfig) -> None:
    """param_offload is FSDP2's CPU offload policy, so on a GPU it needs the fsdp2 strategy."""
    if cfg.trainer.device == "cpu":
        return  # no effect there (offload_note says so)
    arr = cfg.actor_rollout_ref
    for key, offload, strategy_key, strategy in [
            ("actor_rollout_ref.actor.fsdp_config.param_offload", arr.actor.fsdp_config.param_offload,
             "actor_rollout_ref.actor.strategy", arr.actor.strategy),
            ("critic.model.fsdp_config.param_offload", cfg.critic.model.fsdp_config.param_offload,
             "critic.strategy", cfg.critic.strategy)]:
        if offload and strategy not in ("fsdp2", "fsdp"):
            raise ConfigError(f"{key}=true is FSDP2's CPU offload, but {strategy_key}={strategy}; set "
                              f"{strategy_key}=fsdp2 or {key}=false")


def offload_note(cfg: RLConfig) -> Optional[str]:
    """One line for `hybridrl plan` when offload keys are set on a CPU device, where they change nothing."""
    arr, critic = cfg.actor_rollout_ref, cfg.critic.model.fsdp_config
    keys = [k for k, on in [("actor_rollout_ref.actor.fsdp_config.param_offload", arr.actor.fsdp_config.param_offload),
                            ("actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                             arr.actor.fsdp_config.optimizer_offload),
                            ("actor_rollout_ref.ref.fsdp_config.param_offload", arr.ref.fsdp_config.param_offload),
                            ("critic.model.fsdp_config.param_offload", critic.param_offload),
                            ("critic.model.fsdp_config.optimizer_offload", critic.optimizer_offload)] if on]
    if not keys or cfg.trainer.device != "cpu":
        return None
    return (f"offload: {', '.join(keys)} {'has' if len(keys) == 1 else 'have'} no effect with trainer.device=cpu "
            "(weights and AdamW state are in host memory already)")


def skips_zero_advantage(cfg: RLConfig) -> bool:
    """Whether the update leaves zero-advantage responses out: the key is on and doing so is exact."""
    return cfg.actor_rollout_ref.actor.skip_zero_advantage and _zero_advantage_reason(cfg) is None


def _zero_advantage_reason(cfg: RLConfig) -> Optional[str]:
    from hybridrl.algos.zero_advantage import why_not_exact

    a = cfg.actor_rollout_ref.actor
    return why_not_exact(a.policy_loss.loss_mode, a.entropy_coeff, a.use_kl_loss, cfg.distillation.enabled)


def zero_advantage_note(cfg: RLConfig) -> Optional[str]:
    """One line for `hybridrl plan` when actor.skip_zero_advantage is on but cannot apply to this run."""
    reason = _zero_advantage_reason(cfg)
    if not cfg.actor_rollout_ref.actor.skip_zero_advantage or reason is None:
        return None
    return (f"actor_rollout_ref.actor.skip_zero_advantage: every response stays in the update ({reason}), so groups "
            "with equal rewards cost a full forward and backward")


def check_levers(cfg: RLConfig, needs_critic: bool, needs_reference: bool) -> None:
    """Values of the lever keys beyond their declared ranges (dtype spellings, token budgets against the
    sequence length); every problem at once. Rules with the rest of the config live in config/validate.py and plan/checks.py."""
    errors: list[str] = []
    for check in (lambda: _check_token_budgets(cfg, needs_critic, needs_reference), lambda: _check_precision(cfg),
                  lambda: _check_checkpointing(cfg), lambda: _check_offload(cfg)):
        try:
            check()
        except ConfigError as e:
            errors.extend(messages_of(e))
    raise_all(errors)
