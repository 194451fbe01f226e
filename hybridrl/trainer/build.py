"""Assemble a run's collaborators from a validated RLConfig (the driver gets them as arguments)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from omegaconf import OmegaConf

from hybridrl.algos.advantages import AdvantageParams
from hybridrl.algos.kl_ctrl import KLController
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
from hybridrl.trainer.checkpoint import (
    ResumePoint,
    check_output_dir,
    checkpoint_listing,
    config_changes,
    find_resume_point,
)
from hybridrl.trainer.collect import RolloutInputs
from hybridrl.trainer.resumable import check_resumable
from hybridrl.trainer.runlock import RunLock
from hybridrl.trainer.settings import LoopSettings, loop_settings
from hybridrl.trainer.source_choice import rollout_source
from hybridrl.trainer.sources import RolloutSource
from hybridrl.trainer.tracking import Tracker
from hybridrl.workers.build import build_critic, build_policy, build_reference, build_reward_model, build_teacher
from hybridrl.workers.roles import CriticRole, PolicyRole, ReferenceRole, TeacherRole, WorkerProcesses


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
    policy: PolicyRole  # workers/policy.Policy, or with backend=ray a distributed/group.PolicyGroup
    reference: Optional[ReferenceRole]  # only when a KL term needs it (a Reference or a ReferenceGroup)
    teacher: Optional[TeacherRole]  # only with distillation.enabled: the frozen teacher (a Reference or a TeacherGroup)
    critic: Optional[CriticRole]  # only for estimators that need values, gae (a Critic or a CriticGroup)
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
    source: RolloutSource  # where each step's batch comes from: generated now, or the async rollout pool's
    workers: Optional[WorkerProcesses] = None  # backend=ray: the worker processes (RayRoles), ended by close()
    lock: Optional[RunLock] = None  # the run folder's lock (build_run takes it), released by close()

    def close(self) -> None:
        """End everything the run started: the source, the scoring processes, the loggers, the worker processes
        (or the local policy's engine processes: vllm), and last the folder's lock, once nothing writes to it."""
        self.source.close()
        self.reward.close()
        self.tracker.close()
        (self.workers or self.policy).close()  # RayRoles ends every role's process; a local policy its engine
        if self.lock is not None:
            self.lock.release()


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


def build_run(cfg: RLConfig, plan: BatchPlan, log=print, reward: Optional[FunctionRef] = None,
              agent: Optional[Callable] = None) -> RLRun:
    """The run's collaborators. It decides where to resume before it writes anything (a refused resume
    leaves the folder as it was), then holds the folder's lock (`RLRun.lock`) until the trainer ends (or
    this fails); the decision is made again under the lock if the checkpoints changed in between.
    `reward`: a reward function given from Python (hybridrl.train), scored on this driver; `agent`: an agent function
    given from Python (else rollout.agent.path's, if set)."""
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
        run = _build_run(cfg, plan, resume, log, reward, agent)
    except BaseException:
        lock.release()
        raise
    run.lock = lock
    return run


def _build_run(cfg: RLConfig, plan: BatchPlan, resume: Optional[ResumePoint], log,
               function: Optional[FunctionRef] = None, agent: Optional[Callable] = None) -> RLRun:
    d, arr, tr = cfg.data, cfg.actor_rollout_ref, cfg.trainer
    if agent is None and arr.rollout.agent.path is not None:
        from hybridrl.rollout.agent.loading import load_agent

        agent = load_agent(arr.rollout.agent.path, arr.rollout.agent.name)
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
        return _assemble(cfg, plan, total, tokenizer, train_data, val_data, resume, policy, reference, critic,
                         teacher, workers, reward, agent)
    except BaseException:
        for thing in reversed(opened):
            thing.close()
        raise


def _assemble(cfg: RLConfig, plan: BatchPlan, total: int, tokenizer, train_data: RLDataset,
              val_data: Optional[RLDataset], resume: Optional[ResumePoint], policy: PolicyRole,
              reference: Optional[ReferenceRole], critic: Optional[CriticRole], teacher: Optional[TeacherRole],
              workers, reward: RewardManager, agent: Optional[Callable] = None) -> RLRun:
    d, arr, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    rollout, kc, run_dir = arr.rollout, alg.kl_ctrl, tr.default_local_dir
    prompts_per_round = d.gen_batch_size or d.train_batch_size
    vk = rollout.val_kwargs
    loop = loop_settings(cfg)
    sampler = PromptSampler(len(train_data), prompts_per_round, d.seed, d.shuffle)
    sampling = SamplingParams(d.max_response_length, rollout.temperature, rollout.top_p, rollout.top_k,
                              rollout.do_sample, rollout.ignore_eos)
    inputs = RolloutInputs(train_data, sampler, tokenizer.pad_token_id, policy, sampling, reward)
    return RLRun(
        loop=loop, plan=plan, total_steps=total, pad_id=tokenizer.pad_token_id, train_data=train_data,
        val_data=val_data, sampler=sampler,
        policy=policy, reference=reference, critic=critic, teacher=teacher, workers=workers, model_shape=policy.model_shape(),
        kl_ctrl=KLController(kc.kl_coef, kc.type, kc.target_kl, kc.horizon) if alg.use_kl_in_reward else None,
        reward=reward,
        tracker=Tracker(tr.logger, run_dir, resume_step=resume.step if resume else None, project=tr.project_name,
                        experiment=tr.experiment_name, config=OmegaConf.to_container(OmegaConf.structured(cfg))),
        sampling=sampling,
        val_sampling=SamplingParams(d.max_response_length, vk.temperature, vk.top_p, vk.top_k, vk.do_sample),
        adv_params=AdvantageParams(norm_adv_by_std_in_grpo=alg.norm_adv_by_std_in_grpo, gamma=alg.gamma, lam=alg.lam),
        run_dir=run_dir, tokenizer=tokenizer, resume=resume,
        checkpointing=Checkpointing(tr.save_freq, tr.max_actor_ckpt_to_keep, tr.max_critic_ckpt_to_keep),
        # the rollout pool's queue only reads the run's parts: building it starts nothing
        source=rollout_source(cfg, inputs, loop.n, plan.prompts_per_step, loop.group_filter, total,
                              getattr(workers, "rollout", None), agent),
    )
