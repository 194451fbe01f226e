"""Build each role (policy, reference, critic, reward model) from a validated RLConfig: its model with
the role's levers (LoRA, checkpointing, sharding, precision, offload), optimizer and settings.

Below both callers: the one-process run (trainer/build.py) and each Ray worker process
(distributed/worker.py) build their roles here, so neither imports the other.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from hybridrl.plan.levers import (
    actor_dtypes,
    actor_update_batching,
    critic_dtypes,
    critic_update_batching,
    critic_values_batching,
    log_prob_batching,
    ref_batching,
    ref_compute_dtype,
    ref_model_dtype,
    rollout_compute_dtype,
    skips_zero_advantage,
)
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.plan.roles import policy_loss_params
from hybridrl.config.schema import RLConfig
from hybridrl.plan.roles import critic_batch_plan
from hybridrl.library_logs import driver_log
from hybridrl.models.forward import Layout
from hybridrl.models.loading import (
    check_context_length,
    eos_token_ids,
    load_causal_lm,
    load_reward_model,
    load_tokenizer,
    load_value_model,
    resolve_model_path,
)
from hybridrl.models.lora import CRITIC_KEY, POLICY_KEY, LoraSettings, apply_lora, base_policy, plain_state_dict
from hybridrl.models.memory import enable_checkpointing, offload_optimizer_state, on_device
from hybridrl.models.precision import DTYPES, Precision
from hybridrl.models.vocab_match import check_logits_cover, check_same_tokenizer, logits_size
from hybridrl.parallel.dp import SINGLE, DataParallel
from hybridrl.parallel.sharding import Replicated, make_sharding
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.rollout.multi_turn import with_tools
from hybridrl.rollout.tp_layout import ONE_PROCESS, RolloutSeat
from hybridrl.workers.critic import Critic, CriticSettings
from hybridrl.workers.optim import build_optimizer, warmup_steps_of
from hybridrl.workers.policy import Policy, UpdateSettings
from hybridrl.workers.reference import Reference
from hybridrl.workers.reward_model import RewardModel


def _optimizer(module, opt, total: int, offload: bool = False):
    """AdamW over the module's trainable parameters (with LoRA frozen weights get no AdamW state), and its
    schedule; `offload`: its moments wait in host memory between steps (models/memory.py)."""
    params = [p for p in module.parameters() if p.requires_grad]
    warmup = warmup_steps_of(opt.lr_warmup_steps, opt.lr_warmup_steps_ratio, total)
    optimizer, scheduler = build_optimizer(params, opt.lr, opt.weight_decay, opt.betas, warmup, total,
                                           opt.warmup_style, opt.min_lr_ratio)
    if offload:
        offload_optimizer_state(optimizer)
    return optimizer, scheduler


def _on_gpu(cfg: RLConfig, offload: bool) -> bool:
    """An offload key takes effect only on a GPU: on a CPU everything is in host memory already."""
    return offload and cfg.trainer.device != "cpu"


def _trained_module(module, checkpointing: bool, strategy: str, dp: DataParallel, device: str, precision: Precision,
                    param_offload: bool):
    """The memory and precision levers of a trained role (policy, critic): activation checkpointing, then
    its sharding with the role's precision and offload (before the optimizer: it must hold the sharded
    parameters). Returns (module, sharding)."""
    if checkpointing:
        enable_checkpointing(module)
    sharding = make_sharding(strategy, dp, device, precision, param_offload)
    return sharding.wrap(module), sharding


def build_policy(cfg: RLConfig, plan: BatchPlan, tokenizer, total: int, dp: DataParallel = SINGLE,
                 seat: RolloutSeat = ONE_PROCESS) -> Policy:
    """The policy with its rollout engine; `seat`: where this worker sits among a Ray pool's engines."""
    d, arr = cfg.data, cfg.actor_rollout_ref
    actor, rollout = arr.actor, arr.rollout
    fsdp = actor.fsdp_config
    module = load_causal_lm(arr.model.path, "cpu" if _on_gpu(cfg, fsdp.param_offload) else cfg.trainer.device)
    check_context_length(module, d.max_prompt_length, d.max_response_length)
    if arr.model.lora_rank > 0:  # only the adapters train; the base weights are frozen (models/lora.py)
        with torch.random.fork_rng():  # the new A matrices' init depends on the seed only, not on earlier draws
            torch.manual_seed(cfg.trainer.seed)
            module = apply_lora(module, lora_settings(cfg))
    module, sharding = _trained_module(module, arr.model.enable_gradient_checkpointing, actor.strategy, dp,
                                       cfg.trainer.device, Precision.of(*actor_dtypes(cfg), cfg.trainer.device),
                                       _on_gpu(cfg, fsdp.param_offload))
    optimizer, scheduler = _optimizer(module, actor.optim, total, _on_gpu(cfg, fsdp.optimizer_offload))
    engine = with_tools(_engine(cfg, module, tokenizer, sharding, seat), tokenizer, arr.rollout.multi_turn)
    settings = UpdateSettings(
        mini_batch_size=plan.mini_batch_responses_per_worker, micro_batch_size=plan.micro_batch_responses_per_worker,
        ppo_epochs=actor.ppo_epochs, shuffle=actor.shuffle, loss_mode=actor.policy_loss.loss_mode,
        loss_params=policy_loss_params(actor),
        loss_agg_mode=actor.loss_agg_mode, loss_scale_factor=actor.loss_scale_factor or d.max_response_length,
        entropy_coeff=actor.entropy_coeff, use_kl_loss=actor.use_kl_loss,
        kl_loss_coef=actor.kl_loss_coef, kl_loss_type=actor.kl_loss_type, grad_clip=actor.grad_clip,
        temperature=rollout.temperature, log_prob_micro_batch_size=rollout.log_prob_micro_batch_size_per_gpu,
        rollout_is=cfg.algorithm.rollout_correction.rollout_is,
        rollout_is_threshold=cfg.algorithm.rollout_correction.rollout_is_threshold,
        layout=policy_layout(cfg, module), max_tokens=actor_update_batching(cfg, 1).max_tokens,
        log_prob_max_tokens=log_prob_batching(cfg).max_tokens, skip_zero_advantage=skips_zero_advantage(cfg),
        distill_loss_mode=cfg.distillation.distillation_loss.loss_mode if cfg.distillation.enabled else None,
        distill_coef=cfg.distillation.distillation_loss.distillation_loss_coef,
        distill_policy_gradient=cfg.distillation.distillation_loss.use_policy_gradient)
    return Policy(module, optimizer, scheduler, engine, settings, seed=cfg.trainer.seed, sharding=sharding)


def policy_layout(cfg: RLConfig, module) -> Layout:
    """How the policy's and the reference's micro-batches enter the model (models/forward.py)."""
    m = cfg.actor_rollout_ref.model
    return Layout(share_prompts=m.share_prompt_prefix, packed=m.use_remove_padding, pack_width=_width(module))


def _width(module) -> int:
    """The model's hidden size: the packed row length (forward.Layout.pack_width)."""
    config = getattr(module, "config", None)
    return int(getattr(config.get_text_config(), "hidden_size", 0) or 0) if config is not None else 0


def build_rollout_engine(cfg: RLConfig, tokenizer, seat: RolloutSeat = ONE_PROCESS):
    """An async rollout worker's engine (config/schema_async.py): the policy's engine settings (_engine) over its
    own copy of the model, which holds the folder's weights until the trainer's first push (load_weights). vllm:
    its own engine started from that copy (the module is then dropped), its threads on `seat`'s cores."""
    module = load_causal_lm(cfg.actor_rollout_ref.model.path, cfg.trainer.device).eval().requires_grad_(False)
    return _engine(cfg, module, tokenizer, Replicated(), seat, own_copy=True)


def _engine(cfg: RLConfig, module, tokenizer, sharding, seat: RolloutSeat = ONE_PROCESS, own_copy: bool = False):
    """The rollout engine (actor_rollout_ref.rollout.name): hf samples with the policy's module itself;
    vllm is its own engine, built from the policy's folder and synced after every update (in a Ray pool one
    per worker, or one over tensor_model_parallel_size workers: rollout/tp_layout.py)."""
    rollout, seed = cfg.actor_rollout_ref.rollout, cfg.trainer.seed
    eos = eos_token_ids(module, tokenizer)
    if rollout.name == "hf":
        return HFRolloutEngine(module, eos, tokenizer.pad_token_id, seed=seed, max_num_seqs=rollout.max_num_seqs,
                               share_prompts=cfg.actor_rollout_ref.model.share_prompt_prefix,
                               lean_decode=rollout.lean_decode, own_copy=own_copy,
                               pack_weights=rollout.pack_weights,
                               precision=Precision.of(rollout_compute_dtype(cfg), device=cfg.trainer.device))
    from hybridrl.rollout.vllm import VLLMRolloutEngine, VLLMSettings

    VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}  # rollout.dtype, resolved (an unresolved `auto` raises)

    d, tr = cfg.data, cfg.trainer
    settings = VLLMSettings(
        model_path=resolve_model_path(cfg.actor_rollout_ref.model.path), max_model_len=d.max_prompt_length + d.max_response_length,
        max_num_seqs=rollout.max_num_seqs, dtype=VLLM_DTYPES[rollout_compute_dtype(cfg)], enforce_eager=rollout.enforce_eager,
        gpu_memory_utilization=rollout.gpu_memory_utilization, cpu_kv_cache_gb=rollout.cpu_kv_cache_gb, device=tr.device,
        sleep=rollout.free_cache_engine and tr.device == "cuda", engine_kwargs=dict(rollout.engine_kwargs.vllm),
        cpu_cores=seat.cores, tensor_parallel_size=rollout.tensor_model_parallel_size, rank=seat.rank,
        local_rank=seat.local_rank, log_file=driver_log(tr.default_local_dir))  # a Ray worker: its own log
    # every rank takes part (fsdp2: a collective) and starts its engine from the whole weights
    weights = plain_state_dict(module, sharding.full_state_dict(module))  # LoRA: merged, with the base's names
    return VLLMRolloutEngine(settings, eos, tokenizer.pad_token_id, weights, seed=seed)


def build_critic(cfg: RLConfig, total: int, dp: DataParallel = SINGLE) -> Critic:
    c = cfg.critic
    plan, fsdp = critic_batch_plan(cfg), c.model.fsdp_config
    with torch.random.fork_rng():  # the new value head's (and A matrices') init depends on the seed only
        torch.manual_seed(cfg.trainer.seed)
        module = load_value_model(c.model.path or cfg.actor_rollout_ref.model.path, "critic.model.path",
                                  "cpu" if _on_gpu(cfg, fsdp.param_offload) else cfg.trainer.device)
        if c.model.lora_rank > 0:  # adapters and the head train; the base weights are frozen (models/lora.py)
            module = apply_lora(module, critic_lora_settings(cfg))
    module, sharding = _trained_module(module, c.model.enable_gradient_checkpointing, c.strategy, dp,
                                       cfg.trainer.device, Precision.of(*critic_dtypes(cfg), cfg.trainer.device),
                                       _on_gpu(cfg, fsdp.param_offload))
    optimizer, scheduler = _optimizer(module, c.optim, total, _on_gpu(cfg, fsdp.optimizer_offload))
    settings = CriticSettings(
        mini_batch_size=plan.mini_batch_responses_per_worker, micro_batch_size=plan.micro_batch_responses_per_worker,
        forward_micro_batch_size=c.forward_micro_batch_size_per_gpu, ppo_epochs=plan.ppo_epochs, shuffle=c.shuffle,
        cliprange_value=c.cliprange_value, loss_agg_mode=c.loss_agg_mode, grad_clip=c.grad_clip,
        layout=Layout(packed=c.model.use_remove_padding, pack_width=_width(module)),
        max_tokens=critic_update_batching(cfg, 1).max_tokens,
        forward_max_tokens=critic_values_batching(cfg).max_tokens)
    return Critic(module, optimizer, scheduler, settings, seed=cfg.trainer.seed, sharding=sharding)


def build_reference(cfg: RLConfig, policy: Optional[Policy] = None) -> Reference:
    """A frozen copy of the initial weights, built only when a KL term needs it, in ref.fsdp_config's
    model_dtype (bf16: half the memory) and, with param_offload on a GPU, waiting in host memory between
    its passes. With LoRA the policy's own module with its adapter off (the base model, also with
    lora_adapter_path): no copy, so only its compute dtype applies."""
    arr, device = cfg.actor_rollout_ref, cfg.trainer.device
    precision = Precision.of(ref_compute_dtype(cfg), device=device)
    if arr.model.lora_rank > 0:
        if policy is None:
            raise ValueError("a LoRA reference is the policy's module: pass the policy")
        return Reference(policy.module, arr.rollout.temperature, ref_batching(cfg), policy_layout(cfg, policy.module),
                         view=functools.partial(base_policy, policy.module), precision=precision)
    offload = _on_gpu(cfg, arr.ref.fsdp_config.param_offload)
    module = load_causal_lm(arr.model.path, "cpu" if offload else device, DTYPES[ref_model_dtype(cfg)])
    view = functools.partial(on_device, module.eval().requires_grad_(False), device) if offload else None
    return Reference(module, arr.rollout.temperature, ref_batching(cfg), policy_layout(cfg, module), view=view,
                     precision=precision)


def build_teacher(cfg: RLConfig, tokenizer) -> Reference:
    """The distillation teacher (distillation.teacher_model.model_path): a frozen log-prob role like the reference,
    with the reference's batching, precision and offload keys (actor_rollout_ref.ref.*). Its tokenizer must equal the
    student's and its logits cover the student's ids (models/vocab_match.py), else a one-line error names both."""
    arr, device = cfg.actor_rollout_ref, cfg.trainer.device
    path = cfg.distillation.teacher_model.model_path
    check_same_tokenizer(tokenizer, load_tokenizer(path), arr.model.path, path)
    check_logits_cover(logits_size(arr.model.path), logits_size(path, "distillation.teacher_model.model_path"),
                       len(tokenizer), arr.model.path, path)
    offload = _on_gpu(cfg, arr.ref.fsdp_config.param_offload)
    module = load_causal_lm(path, "cpu" if offload else device, DTYPES[ref_model_dtype(cfg)])
    check_context_length(module, cfg.data.max_prompt_length, cfg.data.max_response_length)
    view = functools.partial(on_device, module.eval().requires_grad_(False), device) if offload else None
    return Reference(module, arr.rollout.temperature, ref_batching(cfg), policy_layout(cfg, module), view=view,
                     precision=Precision.of(ref_compute_dtype(cfg), device=device))


def lora_settings(cfg: RLConfig) -> LoraSettings:
    """The policy's LoRA (actor_rollout_ref.model.lora_*)."""
    m = cfg.actor_rollout_ref.model
    adapter = resolve_model_path(m.lora_adapter_path, f"{POLICY_KEY}.lora_adapter_path") if m.lora_adapter_path else None
    return _lora_settings(m.lora_rank, m.lora_alpha, m.target_modules, m.exclude_modules, adapter_path=adapter)


def critic_lora_settings(cfg: RLConfig) -> LoraSettings:
    """The value model's LoRA (critic.model.lora_*): peft's TOKEN_CLS task, so the scalar head trains whole."""
    m = cfg.critic.model
    return _lora_settings(m.lora_rank, m.lora_alpha, m.target_modules, m.exclude_modules, task_type="TOKEN_CLS",
                          key=CRITIC_KEY)


def _lora_settings(rank: int, alpha: float, targets: list[str], exclude: list[str], adapter_path: Optional[str] = None,
                   task_type: str = "CAUSAL_LM", key: str = POLICY_KEY) -> LoraSettings:
    """verl's list spelling as peft reads it: ["all-linear"] is peft's "all-linear" string, [] is None."""
    targets = list(targets)
    return LoraSettings(rank, alpha, "all-linear" if targets == ["all-linear"] else targets, list(exclude) or None,
                        adapter_path, task_type, key)


def build_reward_model(cfg: RLConfig, tokenizer) -> RewardModel:
    rm = cfg.reward_model
    return RewardModel(load_reward_model(rm.model.path, device=cfg.trainer.device), load_tokenizer(rm.model.path),
                       tokenizer, rm.micro_batch_size_per_gpu)
