"""The driver loop's settings, read once from a validated RLConfig: the scalars and small switches trainer/rl.py
and trainer/phases.py consult every step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hybridrl.algos.rollout_correction import RejectionBand
from hybridrl.plan.levers import skips_zero_advantage
from hybridrl.config.schema import RLConfig
from hybridrl.trainer.collect import GroupFilter


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
    rollout_rs: Optional[RejectionBand] = None  # rollout_correction.rollout_rs: mask what π_old/π_rollout rejects
    dump_token_details: bool = False  # rollout_data_dir rows get per-token log-probs (hybridrl view)
    distill: Optional["DistillSettings"] = None  # on-policy distillation (distillation.enabled), None when off
    profile_timeline: Optional[str] = None  # the phase timeline's JSON file (hybridrl/timeline.py), None when off


@dataclass(frozen=True)
class DistillSettings:
    """The driver's part of distillation.*: the actor adds the loss (workers/policy.py)."""

    estimator: str  # distillation_loss.loss_mode: the KL estimator of the distill/teacher_kl_* metrics
    use_task_rewards: bool  # false: the reward's advantages are set to 0 (pure distillation)


def rejection_band(cfg: RLConfig) -> Optional[RejectionBand]:
    """verl's defaults: the upper end is rollout_is_threshold unless set, the lower end its reciprocal."""
    rc = cfg.algorithm.rollout_correction
    if rc.rollout_rs is None:
        return None
    upper = rc.rollout_is_threshold if rc.rollout_rs_threshold is None else rc.rollout_rs_threshold
    return RejectionBand(rc.rollout_rs, upper, 1.0 / upper if rc.rollout_rs_threshold_lower is None
                         else rc.rollout_rs_threshold_lower)


def loop_settings(cfg: RLConfig) -> LoopSettings:
    """The loop's settings of a validated config, every field named."""
    d, arr, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    fg, dl = alg.filter_groups, cfg.distillation.distillation_loss
    return LoopSettings(
        adv_estimator=alg.adv_estimator,
        n=arr.rollout.n,
        val_n=arr.rollout.val_kwargs.n,
        test_freq=tr.test_freq,
        val_before_train=tr.val_before_train,
        max_response_length=d.max_response_length,
        critic_warmup=tr.critic_warmup,
        kl_penalty=alg.kl_penalty,
        group_filter=GroupFilter(fg.metric, fg.max_num_gen_batches) if fg.enable else None,
        log_val_generations=tr.log_val_generations,
        rollout_data_dir=tr.rollout_data_dir,
        validation_data_dir=tr.validation_data_dir,
        share_prompts=arr.model.share_prompt_prefix,
        skip_zero_advantage=skips_zero_advantage(cfg),
        rollout_rs=rejection_band(cfg),
        dump_token_details=tr.dump_token_details,
        distill=DistillSettings(dl.loss_mode, dl.use_task_rewards) if cfg.distillation.enabled else None,
        profile_timeline=tr.profile_timeline,
    )
