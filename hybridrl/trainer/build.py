"""Assemble a run's collaborators from a validated RLConfig (the driver gets them as arguments)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from omegaconf import OmegaConf

from hybridrl.algos.advantages import AdvantageParams
from hybridrl.algos.kl_ctrl import KLController
from hybridrl.algos.rollout_correction import RejectionBand
from hybridrl.config.levers import skips_zero_advantage
from hybridrl.config.memory_fixes import check_memory
from hybridrl.config.plan import BatchPlan, total_training_steps
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import (
    config_warnings,
    needs_critic,
    needs_ground_truth,
    needs_reference,
    needs_teacher,
)
from hybridrl.data.dataset import RLDataset
from hybridrl.data.sampler import PromptSampler
from hybridrl.errors import ConfigError
from hybridrl.models.flops import ModelShape
from hybridrl.models.loading import (
    load_tokenizer,
    resolve_model_path,
    weights_bytes,
)
from hybridrl.paths import check_output_file, check_output_folder
from hybridrl.rewards.manager import OverlongBuffer, RewardManager, RewardSettings
from hybridrl.rewards.pool import FunctionRef, ScoringPool
from hybridrl.rollout.base import SamplingParams
from hybridrl.trainer.async_rollout import AsyncRollouts
from hybridrl.trainer.checkpoint import (
    ResumePoint,
    check_output_dir,
    checkpoint_listing,
    config_changes,
    find_resume_point,
)
from hybridrl.trainer.collect import GroupFilter
from hybridrl.trainer.resumable import check_resumable
from hybridrl.trainer.runlock import RunLock
from hybridrl.trainer.tracking import Tracker
from hybridrl.workers.build import build_critic, build_policy, build_reference, build_reward_model, build_teacher
from hybridrl.workers.critic import Critic
from hybridrl.workers.policy import Policy
from hybridrl.workers.reference import Reference


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
    teacher: Optional[Reference]  # only with distillation.enabled: the frozen teacher (or a TeacherGroup)
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
    rollouts: Optional[AsyncRollouts] = None  # asynchronous training: batches from the rollout pool (else generated)


def _roles(cfg: RLConfig, plan: BatchPlan, total: int, tokenizer, log) -> tuple:
    """(policy, reference, critic, teacher, workers, reward_model): the local roles, or with backend=ray the groups
    of RayRoles (`workers`), whose rank r lives in worker process r (distributed/group.py);
    reward_model is None unless it has its own Ray pool (then it is built with the reward manager)."""
    if cfg.trainer.backend == "ray":
        from hybridrl.distributed.group import RayRoles

        roles = RayRoles(cfg, plan, total, tokenizer.pad_token_id, log)
        return roles.policy, roles.reference, roles.critic, roles.teacher, roles, roles.reward_model
    policy = build_policy(cfg, plan, tokenizer, total)
    try:
        reference = build_reference(cfg, policy) if needs_reference(cfg) else None
        critic = build_critic(cfg, total) if needs_critic(cfg) else None
        teacher = build_teacher(cfg, tokenizer) if needs_teacher(cfg) else None
    except BaseException:
        policy.close()  # the rollout engine's processes (vllm)
        raise
    return policy, reference, critic, teacher, None, None


def reward_manager(cfg: RLConfig, tokenizer, model=None, function: Optional[FunctionRef] = None) -> RewardManager:
    """`model`: the reward model's own pool (backend=ray), else it is built here when enabled. `function`: the
    reward function given from Python (hybridrl.train), instead of custom_reward_function.*."""
    rm, crf, ob = cfg.reward_model, cfg.custom_reward_function, cfg.reward_model.overlong_buffer
    if rm.enable and model is None:
        model = build_reward_model(cfg, tokenizer)
    settings = RewardSettings(
        on_error=rm.on_error, rm_weight=rm.rm_weight, rule_weight=rm.rule_weight,
        overlong=OverlongBuffer(cfg.data.max_response_length, ob.len, ob.penalty_factor) if ob.enable else None)
    ref = function or FunctionRef(crf.path, crf.name, batched=rm.reward_manager == "batch")
    return RewardManager(tokenizer, ScoringPool(ref, rm.num_workers, rm.timeout_s), settings, model)


def build_run(cfg: RLConfig, plan: BatchPlan, log=print, reward: Optional[FunctionRef] = None) -> RLRun:
    """The run's collaborators. It decides where to resume before it writes anything (a refused resume
    leaves the folder as it was), then holds the folder's lock (`RLRun.lock`) until the trainer ends (or
    this fails); the decision is made again under the lock if the checkpoints changed in between.
    `reward`: a reward function given from Python (hybridrl.train), scored on this driver."""
    for warning in config_warnings(cfg):
        log(f"WARNING: {warning}")
    log(check_memory(cfg, plan).describe().splitlines()[0])  # refuses a config that cannot fit, before any load
    tr = cfg.trainer
    seen = checkpoint_listing(tr.default_local_dir)
    resume = resume_point(cfg, log)  # it only reads: a refused resume leaves the folder as it was
    for key in ("default_local_dir", "rollout_data_dir", "validation_data_dir"):  # written every step: check now
        if getattr(tr, key) is not None:
            check_output_folder(getattr(tr, key), f"trainer.{key}")
    if tr.profile_timeline is not None:
        check_output_file(tr.profile_timeline, "trainer.profile_timeline")
    lock = RunLock(tr.default_local_dir, log=log)  # a second run on this folder stops here
    try:
        if checkpoint_listing(tr.default_local_dir) != seen:  # a run that ended meanwhile saved or pruned: decide again
            resume = resume_point(cfg, log)
        run = _build_run(cfg, plan, resume, log, reward)
    except BaseException:
        lock.release()
        raise
    run.lock = lock
    return run


def _build_run(cfg: RLConfig, plan: BatchPlan, resume: Optional[ResumePoint], log,
               function: Optional[FunctionRef] = None) -> RLRun:
    d, arr, tr = cfg.data, cfg.actor_rollout_ref, cfg.trainer
    run_dir = tr.default_local_dir
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
    policy, reference, critic, teacher, workers, reward_model = _roles(cfg, plan, total, tokenizer, log)
    opened = [workers or policy]  # closed if the start fails from here on: no worker process or engine outlives it
    try:
        if resume is not None:  # a checkpoint of another model is refused before anything is written
            check_resumable(resume.path, policy, critic, "actor_rollout_ref.model", "critic.model")
        reward = reward_manager(cfg, tokenizer, reward_model, function)
        opened.append(reward)
        os.makedirs(run_dir, exist_ok=True)
        OmegaConf.save(OmegaConf.structured(cfg), os.path.join(run_dir, "config.yaml"))
        run = _assemble(cfg, plan, total, tokenizer, train_data, val_data, resume, policy, reference, critic,
                        teacher, workers, reward)
        run.rollouts = AsyncRollouts.of_run(cfg, run, getattr(workers, "rollout", None))
        return run
    except BaseException:
        for thing in reversed(opened):
            thing.close()
        raise


def rejection_band(cfg: RLConfig) -> Optional[RejectionBand]:
    """verl's defaults: the upper end is rollout_is_threshold unless set, the lower end its reciprocal."""
    rc = cfg.algorithm.rollout_correction
    if rc.rollout_rs is None:
        return None
    upper = rc.rollout_is_threshold if rc.rollout_rs_threshold is None else rc.rollout_rs_threshold
    return RejectionBand(rc.rollout_rs, upper, 1.0 / upper if rc.rollout_rs_threshold_lower is None
                         else rc.rollout_rs_threshold_lower)


def _assemble(cfg: RLConfig, plan: BatchPlan, total: int, tokenizer, train_data: RLDataset,
              val_data: Optional[RLDataset], resume: Optional[ResumePoint], policy, reference, critic, teacher,
              workers, reward: RewardManager) -> RLRun:
    d, arr, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    rollout, kc, fg, run_dir = arr.rollout, alg.kl_ctrl, alg.filter_groups, tr.default_local_dir
    dl = cfg.distillation.distillation_loss
    prompts_per_round = d.gen_batch_size or d.train_batch_size
    vk = rollout.val_kwargs
    return RLRun(
        loop=LoopSettings(alg.adv_estimator, rollout.n, vk.n, tr.test_freq, tr.val_before_train, d.max_response_length,
                          tr.critic_warmup, alg.kl_penalty,
                          GroupFilter(fg.metric, fg.max_num_gen_batches) if fg.enable else None,
                          tr.log_val_generations, tr.rollout_data_dir, tr.validation_data_dir,
                          arr.model.share_prompt_prefix, skips_zero_advantage(cfg), rejection_band(cfg),
                          tr.dump_token_details,
                          DistillSettings(dl.loss_mode, dl.use_task_rewards) if cfg.distillation.enabled else None,
                          tr.profile_timeline),
        plan=plan, total_steps=total, pad_id=tokenizer.pad_token_id, train_data=train_data, val_data=val_data,
        sampler=PromptSampler(len(train_data), prompts_per_round, d.seed, d.shuffle),
        policy=policy, reference=reference, critic=critic, teacher=teacher, workers=workers, model_shape=policy.model_shape(),
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
