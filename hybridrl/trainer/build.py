"""Assemble a run's collaborators from a validated RLConfig (the driver gets them as arguments)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from omegaconf import OmegaConf

from hybridrl.algos.advantages import AdvantageParams
from hybridrl.algos.policy_losses import PolicyLossParams
from hybridrl.config.plan import BatchPlan, total_training_steps
from hybridrl.config.schema import RLConfig
from hybridrl.data.dataset import RLDataset
from hybridrl.data.sampler import PromptSampler
from hybridrl.models.loading import check_context_length, eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.rewards.manager import RewardManager
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.trainer.optim import build_optimizer, warmup_steps_of
from hybridrl.trainer.tracking import Tracker
from hybridrl.workers.policy import Policy, UpdateSettings
from hybridrl.workers.reference import Reference


@dataclass
class RLRun:
    """Everything the driver loop touches."""

    plan: BatchPlan
    total_steps: int
    pad_id: int
    train_data: RLDataset
    val_data: Optional[RLDataset]
    sampler: PromptSampler
    policy: Policy
    reference: Optional[Reference]
    reward: RewardManager
    tracker: Tracker
    sampling: SamplingParams
    val_sampling: SamplingParams
    adv_params: AdvantageParams
    run_dir: str


def build_run(cfg: RLConfig, plan: BatchPlan, log=print) -> RLRun:
    d, arr, tr = cfg.data, cfg.actor_rollout_ref, cfg.trainer
    actor, rollout = arr.actor, arr.rollout
    tokenizer = load_tokenizer(arr.model.path)

    def dataset(files: list[str], key: str) -> RLDataset:
        data = RLDataset(files, tokenizer, d.prompt_key, d.max_prompt_length, d.truncation, d.filter_overlong_prompts, key)
        if data.num_filtered:
            log(f"{key}: dropped {data.num_filtered} prompts over data.max_prompt_length={d.max_prompt_length}")
        return data

    train_data = dataset(d.train_files, "data.train_files")
    val_data = dataset(d.val_files, "data.val_files") if d.val_files else None
    total = total_training_steps(len(train_data), d.train_batch_size, tr.total_epochs, tr.total_training_steps)

    module = load_causal_lm(arr.model.path)
    check_context_length(module, d.max_prompt_length, d.max_response_length)
    opt = actor.optim
    optimizer, scheduler = build_optimizer(
        module.parameters(), opt.lr, opt.weight_decay, opt.betas,
        warmup_steps_of(opt.lr_warmup_steps, opt.lr_warmup_steps_ratio, total), total, opt.warmup_style, opt.min_lr_ratio)
    engine = HFRolloutEngine(module, eos_token_ids(module, tokenizer), tokenizer.pad_token_id, seed=tr.seed)
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
        temperature=rollout.temperature, log_prob_micro_batch_size=rollout.log_prob_micro_batch_size_per_gpu)
    policy = Policy(module, optimizer, scheduler, engine, settings, seed=tr.seed)
    # The reference exists only when a KL term needs it: a frozen copy of the initial weights.
    reference = (Reference(load_causal_lm(arr.model.path), rollout.temperature, arr.ref.log_prob_micro_batch_size_per_gpu)
                 if actor.use_kl_loss else None)

    run_dir = tr.default_local_dir
    os.makedirs(run_dir, exist_ok=True)
    OmegaConf.save(OmegaConf.structured(cfg), os.path.join(run_dir, "config.yaml"))
    vk = rollout.val_kwargs
    return RLRun(
        plan=plan, total_steps=total, pad_id=tokenizer.pad_token_id, train_data=train_data, val_data=val_data,
        sampler=PromptSampler(len(train_data), d.train_batch_size, d.seed, d.shuffle),
        policy=policy, reference=reference, reward=RewardManager(tokenizer),
        tracker=Tracker(tr.logger, run_dir),
        sampling=SamplingParams(d.max_response_length, rollout.temperature, rollout.top_p, rollout.top_k, rollout.do_sample),
        val_sampling=SamplingParams(d.max_response_length, vk.temperature, vk.top_p, vk.top_k, vk.do_sample),
        adv_params=AdvantageParams(norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std_in_grpo,
                                   gamma=cfg.algorithm.gamma),
        run_dir=run_dir,
    )
