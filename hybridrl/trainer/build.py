"""Assemble a run's collaborators from a validated RLConfig (the driver gets them as arguments)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Optional

import torch
from omegaconf import OmegaConf

from hybridrl.algos.advantages import AdvantageParams
from hybridrl.algos.kl_ctrl import KLController
from hybridrl.algos.policy_losses import PolicyLossParams
from hybridrl.config.levers import (
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
from hybridrl.config.memory import check_memory
from hybridrl.config.plan import BatchPlan, total_training_steps
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import (
    config_warnings,
    critic_batch_plan,
    needs_critic,
    needs_ground_truth,
    needs_reference,
)
from hybridrl.data.dataset import RLDataset
from hybridrl.data.sampler import PromptSampler
from hybridrl.distributed.dp import SINGLE, DataParallel
from hybridrl.distributed.sharding import make_sharding
from hybridrl.errors import ConfigError
from hybridrl.models.flops import ModelShape
from hybridrl.models.forward import Layout
from hybridrl.models.loading import (
    check_context_length,
    eos_token_ids,
    load_causal_lm,
    load_reward_model,
    load_tokenizer,
    load_value_model,
    resolve_model_path,
    weights_bytes,
)
from hybridrl.models.lora import CRITIC_KEY, POLICY_KEY, LoraSettings, apply_lora, base_policy, plain_state_dict
from hybridrl.paths import check_output_folder
from hybridrl.models.memory import enable_checkpointing, offload_optimizer_state, on_device
from hybridrl.models.precision import DTYPES, Precision
from hybridrl.rewards.manager import OverlongBuffer, RewardManager, RewardSettings
from hybridrl.rewards.pool import FunctionRef, ScoringPool
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.rollout.multi_turn import with_tools
from hybridrl.trainer.checkpoint import (
    ResumePoint,
    check_output_dir,
    config_changes,
    find_resume_point,
)
from hybridrl.trainer.collect import GroupFilter
from hybridrl.trainer.optim import build_optimizer, warmup_steps_of
from hybridrl.trainer.resumable import check_resumable
from hybridrl.trainer.runlock import RunLock
from hybridrl.trainer.tracking import Tracker
from hybridrl.workers.critic import Critic, CriticSettings
from hybridrl.workers.policy import Policy, UpdateSettings
from hybridrl.workers.reference import Reference
from hybridrl.workers.reward_model import RewardModel


@dataclass(frozen=True)
class LoopSettings:
    """The driver loop's scalar settings."""

    adv_estimator: str
    n: int  # responses per prompt
    val_n: int  # samples per validation prompt
    test_freq: int
    val_before_train: bool
    max_response_length: int
    critic_warmup: int  # the first N steps update only the critic
    kl_penalty: str  # KL estimator of the in-reward penalty
    group_filter: Optional[GroupFilter]  # DAPO dynamic sampling, None when off
    log_val_generations: int = 0  # validation generations sent to the loggers
    rollout_data_dir: Optional[str] = None  # every training generation as <dir>/<step>.jsonl
    validation_data_dir: Optional[str] = None  # ... every validation generation
    share_prompts: bool = False  # model.share_prompt_prefix: each group's prompt runs once (for perf/mfu/actor)
    skip_zero_advantage: bool = False  # actor.skip_zero_advantage where exact: π_old only of rows with a gradient


@dataclass(frozen=True)
class Checkpointing:
    save_freq: int  # every N steps and the last; -1: the last only; 0: never
    keep_actor: Optional[int]  # newest checkpoints kept (None: all)
    keep_critic: Optional[int]  # newest checkpoints that keep their critic/ (None: all)

    def due(self, step: int, last: bool) -> bool:
        return self.save_freq != 0 and (last or (self.save_freq > 0 and step % self.save_freq == 0))


def resume_point(cfg: RLConfig, log=print) -> Optional[ResumePoint]:
    """The checkpoint this run continues from (trainer.resume_mode), refusing one written with a
    config that would compute something else."""
    tr = cfg.trainer
    point = find_resume_point(tr.resume_mode, tr.default_local_dir, tr.resume_from_path, log)
    changes = config_changes(os.path.join(point.path, "config.yaml"), cfg) if point is not None else []
    if changes and tr.resume_allow_config_change:  # they take effect (the optimizer's too): say which
        log(f"note: resuming {point.path} with a changed config (trainer.resume_allow_config_change=true): "
            f"{'; '.join(changes)}")
    elif changes:
        raise ConfigError(
            f"{point.path} was written with a different config: {'; '.join(changes)}. Resume with the same "
            "values, set trainer.resume_allow_config_change=true to continue anyway, or trainer.resume_mode=disable "
            "to start over")
    return point


@dataclass
class RLRun:
    """Everything the driver loop touches."""

    loop: LoopSettings
    plan: BatchPlan
    total_steps: int
    pad_id: int
    train_data: RLDataset
    val_data: Optional[RLDataset]
    sampler: PromptSampler
    policy: Policy  # or, with backend=ray, a PolicyGroup with the same methods
    reference: Optional[Reference]  # only when a KL term needs it (or a ReferenceGroup)
    critic: Optional[Critic]  # only for estimators that need values, gae (or a CriticGroup)
    kl_ctrl: Optional[KLController]  # only with algorithm.use_kl_in_reward
    reward: RewardManager
    tracker: Tracker
    sampling: SamplingParams
    val_sampling: SamplingParams
    adv_params: AdvantageParams
    run_dir: str
    tokenizer: object  # saved into every checkpoint's actor/ folder
    resume: Optional[ResumePoint]  # the checkpoint to continue from, None for a fresh start
    checkpointing: Checkpointing
    model_shape: ModelShape  # the policy's, for perf/mfu/actor
    workers: Optional[object] = None  # backend=ray: the worker processes (RayRoles), shut down by the trainer
    lock: Optional[RunLock] = None  # the run folder's lock (build_run takes it), released by the trainer


def _roles(cfg: RLConfig, plan: BatchPlan, total: int, tokenizer, log) -> tuple:
    """(policy, reference, critic, workers, reward_model): the local roles, or with backend=ray the groups
    of RayRoles (`workers`), whose rank r lives in worker process r (distributed/group.py);
    reward_model is None unless it has its own Ray pool (then it is built with the reward manager)."""
    if cfg.trainer.backend == "ray":
        from hybridrl.distributed.group import RayRoles

        roles = RayRoles(cfg, plan, total, tokenizer.pad_token_id, log)
        return roles.policy, roles.reference, roles.critic, roles, roles.reward_model
    policy = build_policy(cfg, plan, tokenizer, total)
    try:
        reference = build_reference(cfg, policy) if needs_reference(cfg) else None
        critic = build_critic(cfg, total) if needs_critic(cfg) else None
    except BaseException:
        policy.close()  # the rollout engine's processes (vllm)
        raise
    return policy, reference, critic, None, None


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


def build_policy(cfg: RLConfig, plan: BatchPlan, tokenizer, total: int, dp: DataParallel = SINGLE) -> Policy:
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
    engine = with_tools(_engine(cfg, module, tokenizer, sharding), tokenizer, arr.rollout.multi_turn)
    settings = UpdateSettings(
        mini_batch_size=plan.mini_batch_responses_per_worker, micro_batch_size=plan.micro_batch_responses_per_worker,
        ppo_epochs=actor.ppo_epochs, shuffle=actor.shuffle, loss_mode=actor.policy_loss.loss_mode,
        loss_params=PolicyLossParams(
            clip_ratio_low=actor.clip_ratio if actor.clip_ratio_low is None else actor.clip_ratio_low,
            clip_ratio_high=actor.clip_ratio if actor.clip_ratio_high is None else actor.clip_ratio_high,
            clip_ratio_c=actor.clip_ratio_c, tau_pos=actor.tau_pos, tau_neg=actor.tau_neg),
        loss_agg_mode=actor.loss_agg_mode, loss_scale_factor=actor.loss_scale_factor or d.max_response_length,
        entropy_coeff=actor.entropy_coeff, use_kl_loss=actor.use_kl_loss,
        kl_loss_coef=actor.kl_loss_coef, kl_loss_type=actor.kl_loss_type, grad_clip=actor.grad_clip,
        temperature=rollout.temperature, log_prob_micro_batch_size=rollout.log_prob_micro_batch_size_per_gpu,
        rollout_is=cfg.algorithm.rollout_correction.rollout_is,
        rollout_is_threshold=cfg.algorithm.rollout_correction.rollout_is_threshold,
        layout=policy_layout(cfg, module), max_tokens=actor_update_batching(cfg, 1).max_tokens,
        log_prob_max_tokens=log_prob_batching(cfg).max_tokens, skip_zero_advantage=skips_zero_advantage(cfg))
    return Policy(module, optimizer, scheduler, engine, settings, seed=cfg.trainer.seed, sharding=sharding)


def policy_layout(cfg: RLConfig, module) -> Layout:
    """How the policy's and the reference's micro-batches enter the model (models/forward.py)."""
    m = cfg.actor_rollout_ref.model
    return Layout(share_prompts=m.share_prompt_prefix, packed=m.use_remove_padding, pack_width=_width(module))


def _width(module) -> int:
    """The model's hidden size: the packed row length (forward.Layout.pack_width)."""
    config = getattr(module, "config", None)
    return int(getattr(config.get_text_config(), "hidden_size", 0) or 0) if config is not None else 0


def _engine(cfg: RLConfig, module, tokenizer, sharding):
    """The rollout engine (actor_rollout_ref.rollout.name): hf samples with the policy's module itself;
    vllm is its own engine, built from the policy's folder and synced after every update."""
    rollout, seed = cfg.actor_rollout_ref.rollout, cfg.trainer.seed
    eos = eos_token_ids(module, tokenizer)
    if rollout.name == "hf":
        return HFRolloutEngine(module, eos, tokenizer.pad_token_id, seed=seed, max_num_seqs=rollout.max_num_seqs,
                               share_prompts=cfg.actor_rollout_ref.model.share_prompt_prefix,
                               lean_decode=rollout.lean_decode,
                               precision=Precision.of(rollout_compute_dtype(cfg), device=cfg.trainer.device))
    from hybridrl.rollout.vllm import VLLMRolloutEngine, VLLMSettings

    d, tr = cfg.data, cfg.trainer
    settings = VLLMSettings(
        model_path=resolve_model_path(cfg.actor_rollout_ref.model.path), max_model_len=d.max_prompt_length + d.max_response_length,
        max_num_seqs=rollout.max_num_seqs, dtype=rollout.dtype, enforce_eager=rollout.enforce_eager,
        gpu_memory_utilization=rollout.gpu_memory_utilization, cpu_kv_cache_gb=rollout.cpu_kv_cache_gb, device=tr.device,
        sleep=rollout.free_cache_engine and tr.device == "cuda", engine_kwargs=dict(rollout.engine_kwargs.vllm))
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


def _reward(cfg: RLConfig, tokenizer, model=None) -> RewardManager:
    """`model`: the reward model's own pool (backend=ray), else it is built here when enabled."""
    rm, crf, ob = cfg.reward_model, cfg.custom_reward_function, cfg.reward_model.overlong_buffer
    if rm.enable and model is None:
        model = build_reward_model(cfg, tokenizer)
    settings = RewardSettings(
        on_error=rm.on_error, rm_weight=rm.rm_weight, rule_weight=rm.rule_weight,
        overlong=OverlongBuffer(cfg.data.max_response_length, ob.len, ob.penalty_factor) if ob.enable else None)
    ref = FunctionRef(crf.path, crf.name, batched=rm.reward_manager == "batch")
    return RewardManager(tokenizer, ScoringPool(ref, rm.num_workers, rm.timeout_s), settings, model)


def build_run(cfg: RLConfig, plan: BatchPlan, log=print) -> RLRun:
    """The run's collaborators. It holds its folder's lock (`RLRun.lock`) from before it reads a
    checkpoint there until the trainer ends (or this fails)."""
    for warning in config_warnings(cfg):
        log(f"WARNING: {warning}")
    log(check_memory(cfg, plan).describe().splitlines()[0])  # refuses a config that cannot fit, before any load
    tr = cfg.trainer
    for key in ("default_local_dir", "rollout_data_dir", "validation_data_dir"):  # written every step: check now
        if getattr(tr, key) is not None:
            check_output_folder(getattr(tr, key), f"trainer.{key}")
    lock = RunLock(tr.default_local_dir, log=log)  # a second run on this folder stops here
    try:
        run = _build_run(cfg, plan, log)
    except BaseException:
        lock.release()
        raise
    run.lock = lock
    return run


def _build_run(cfg: RLConfig, plan: BatchPlan, log) -> RLRun:
    d, arr, tr = cfg.data, cfg.actor_rollout_ref, cfg.trainer
    run_dir = tr.default_local_dir
    resume = resume_point(cfg, log)  # before anything is written to run_dir
    if tr.save_freq != 0:  # a full disk fails now, not at the first save
        folders = [arr.model.path] + ([cfg.critic.model.path or arr.model.path] if needs_critic(cfg) else [])
        check_output_dir(run_dir, sum(3 * weights_bytes(resolve_model_path(f)) for f in folders))
    tokenizer = load_tokenizer(arr.model.path)

    def dataset(files: list[str], key: str, max_samples: int) -> RLDataset:
        data = RLDataset(files, tokenizer, d.prompt_key, d.max_prompt_length, d.truncation, d.filter_overlong_prompts, key,
                         max_samples, d.reward_fn_key, d.skip_bad_rows, needs_ground_truth(cfg))
        if data.num_filtered:
            log(f"{key}: dropped {data.num_filtered} prompts over data.max_prompt_length={d.max_prompt_length}")
        if data.num_bad:
            log(f"{key}: skipped {data.num_bad} bad rows (data.skip_bad_rows=true); first: {data.first_bad}")
        return data

    train_data = dataset(d.train_files, "data.train_files", d.train_max_samples)
    val_data = dataset(d.val_files, "data.val_files", d.val_max_samples) if d.val_files else None
    prompts_per_round = d.gen_batch_size or d.train_batch_size  # dynamic sampling generates in rounds
    total = total_training_steps(len(train_data), prompts_per_round, tr.total_epochs, tr.total_training_steps)
    policy, reference, critic, workers, reward_model = _roles(cfg, plan, total, tokenizer, log)
    opened = [workers or policy]  # closed if the start fails from here on: no worker process or engine outlives it
    try:
        if resume is not None:  # a checkpoint of another model is refused before anything is written
            check_resumable(resume.path, policy, critic, "actor_rollout_ref.model", "critic.model")
        reward = _reward(cfg, tokenizer, reward_model)
        opened.append(reward)
        os.makedirs(run_dir, exist_ok=True)
        OmegaConf.save(OmegaConf.structured(cfg), os.path.join(run_dir, "config.yaml"))
        return _assemble(cfg, plan, total, tokenizer, train_data, val_data, resume, policy, reference, critic,
                         workers, reward)
    except BaseException:
        for thing in reversed(opened):
            thing.close()
        raise


def _assemble(cfg: RLConfig, plan: BatchPlan, total: int, tokenizer, train_data: RLDataset,
              val_data: Optional[RLDataset], resume: Optional[ResumePoint], policy, reference, critic, workers,
              reward: RewardManager) -> RLRun:
    d, arr, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    rollout, kc, fg, run_dir = arr.rollout, alg.kl_ctrl, alg.filter_groups, tr.default_local_dir
    prompts_per_round = d.gen_batch_size or d.train_batch_size
    vk = rollout.val_kwargs
    return RLRun(
        loop=LoopSettings(alg.adv_estimator, rollout.n, vk.n, tr.test_freq, tr.val_before_train, d.max_response_length,
                          tr.critic_warmup, alg.kl_penalty,
                          GroupFilter(fg.metric, fg.max_num_gen_batches) if fg.enable else None,
                          tr.log_val_generations, tr.rollout_data_dir, tr.validation_data_dir,
                          arr.model.share_prompt_prefix, skips_zero_advantage(cfg)),
        plan=plan, total_steps=total, pad_id=tokenizer.pad_token_id, train_data=train_data, val_data=val_data,
        sampler=PromptSampler(len(train_data), prompts_per_round, d.seed, d.shuffle),
        policy=policy, reference=reference, critic=critic, workers=workers, model_shape=policy.model_shape(),
        kl_ctrl=KLController(kc.kl_coef, kc.type, kc.target_kl, kc.horizon) if alg.use_kl_in_reward else None,
        reward=reward,
        tracker=Tracker(tr.logger, run_dir, resume_step=resume.step if resume else None, project=tr.project_name,
                        experiment=tr.experiment_name, config=OmegaConf.to_container(OmegaConf.structured(cfg))),
        sampling=SamplingParams(d.max_response_length, rollout.temperature, rollout.top_p, rollout.top_k, rollout.do_sample,
                                rollout.ignore_eos),
        val_sampling=SamplingParams(d.max_response_length, vk.temperature, vk.top_p, vk.top_k, vk.do_sample),
        adv_params=AdvantageParams(norm_adv_by_std_in_grpo=alg.norm_adv_by_std_in_grpo, gamma=alg.gamma, lam=alg.lam),
        run_dir=run_dir, tokenizer=tokenizer, resume=resume,
        checkpointing=Checkpointing(tr.save_freq, tr.max_actor_ckpt_to_keep, tr.max_critic_ckpt_to_keep),
    )
