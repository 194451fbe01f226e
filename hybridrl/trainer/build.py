"""Assemble a run's collaborators from a resolved RunPlan (plan/resolve.py; the driver gets them as arguments).
The plan is read once, here: its config (every derived value filled in) and batch plan go to the roles."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from omegaconf import OmegaConf

from hybridrl.algos.advantages import AdvantageParams
from hybridrl.algos.kl_ctrl import KLController
from hybridrl.plan.memory_fixes import check_memory
from hybridrl.plan.batch_plan import BatchPlan, total_training_steps
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import needs_ground_truth
from hybridrl.plan.resolve import RunPlan
from hybridrl.plan.roles import needs_critic, needs_reference, needs_teacher
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


@dataclass(frozen=True)
class Roles:
    """The run's models: the local roles, or with backend=ray the groups of RayRoles (`workers`), whose rank r
    lives in worker process r (distributed/group.py)."""

    policy: PolicyRole  # workers/policy.Policy, or a distributed/group.PolicyGroup
    reference: Optional[ReferenceRole] = None  # only when a KL term needs it
    critic: Optional[CriticRole] = None  # only for estimators that need values (gae)
    teacher: Optional[TeacherRole] = None  # only with distillation.enabled
    workers: Optional[WorkerProcesses] = None  # backend=ray: the RayRoles that own every role's process
    reward_model: Optional[object] = None  # backend=ray with reward_model.enable: its own pool (else the reward
    # manager builds the model itself)


@dataclass(frozen=True)
class RunData:
    """The run's prompts and what follows from them."""

    train: RLDataset  # data.train_files, filtered
    val: Optional[RLDataset]  # data.val_files (None: no validation)
    total_steps: int  # trainer.total_training_steps, or epochs x batches per epoch
    tokenizer: object  # the policy's (actor_rollout_ref.model.path)


def _roles(cfg: RLConfig, plan: BatchPlan, total: int, tokenizer, log) -> Roles:
    """The roles the config needs, built locally or (backend=ray) in their worker processes."""
    if cfg.trainer.backend == "ray":
        from hybridrl.distributed.group import RayRoles

        ray = RayRoles(cfg, plan, total, tokenizer.pad_token_id, log)
        return Roles(policy=ray.policy, reference=ray.reference, critic=ray.critic, teacher=ray.teacher, workers=ray,
                     reward_model=ray.reward_model)
    policy = build_policy(cfg, plan, tokenizer, total)
    try:
        return Roles(policy=policy,
                     reference=build_reference(cfg, policy) if needs_reference(cfg) else None,
                     critic=build_critic(cfg, total) if needs_critic(cfg) else None,
                     teacher=build_teacher(cfg, tokenizer) if needs_teacher(cfg) else None)
    except BaseException:
        policy.close()  # the rollout engine's processes (vllm)
        raise


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


def build_run(run_plan: RunPlan, log=print, reward: Optional[FunctionRef] = None,
              agent: Optional[Callable] = None) -> RLRun:
    """The run's collaborators, from `run_plan` (plan.resolve's: nothing here changes its config). It decides where to resume before it writes anything (a refused resume
    leaves the folder as it was), then holds the folder's lock (`RLRun.lock`) until the trainer ends (or
    this fails); the decision is made again under the lock if the checkpoints changed in between.
    `reward`: a reward function given from Python (hybridrl.train), scored on this driver; `agent`: an agent function
    given from Python (else rollout.agent.path's, if set)."""
    cfg, plan = run_plan.config, run_plan.batch
    for warning in run_plan.warnings():
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
        run = _build_run(cfg, plan, resume=resume, log=log, function=reward, agent=agent)
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
        data = RLDataset(files, tokenizer, prompt_key=d.prompt_key, max_prompt_length=d.max_prompt_length,
                         truncation=d.truncation, filter_overlong_prompts=d.filter_overlong_prompts, key=key,
                         max_samples=max_samples, reward_fn_key=d.reward_fn_key, skip_bad_rows=d.skip_bad_rows,
                         need_ground_truth=needs_ground_truth(cfg))
        if data.num_filtered:
            log(f"{key}: dropped {data.num_filtered} prompts over data.max_prompt_length={d.max_prompt_length}")
        if data.num_bad:
            log(f"{key}: skipped {data.num_bad} bad rows (data.skip_bad_rows=true); first: {data.first_bad}")
        return data

    train_data = dataset(d.train_files, "data.train_files", d.train_max_samples)
    val_data = dataset(d.val_files, "data.val_files", d.val_max_samples) if d.val_files else None
    prompts_per_round = d.gen_batch_size or d.train_batch_size  # dynamic sampling generates in rounds
    total = total_training_steps(len(train_data), prompts_per_round, tr.total_epochs, tr.total_training_steps)
    roles = _roles(cfg, plan, total, tokenizer, log)
    opened = [roles.workers or roles.policy]  # closed if the start fails from here on: no process outlives it
    try:
        if resume is not None:  # a checkpoint of another model is refused before anything is written
            check_resumable(resume.path, roles.policy, roles.critic, "actor_rollout_ref.model", "critic.model")
        reward = reward_manager(cfg, tokenizer, model=roles.reward_model, function=function)
        opened.append(reward)
        os.makedirs(run_dir, exist_ok=True)
        OmegaConf.save(OmegaConf.structured(cfg), os.path.join(run_dir, "config.yaml"))
        run_data = RunData(train=train_data, val=val_data, total_steps=total, tokenizer=tokenizer)
        return _assemble(cfg, plan, data=run_data, roles=roles, reward=reward, resume=resume, agent=agent)
    except BaseException:
        for thing in reversed(opened):
            thing.close()
        raise


def _assemble(cfg: RLConfig, plan: BatchPlan, data: RunData, roles: Roles, reward: RewardManager,
              resume: Optional[ResumePoint], agent: Optional[Callable] = None) -> RLRun:
    """The RLRun of the built parts; building it starts nothing (the source generates from its start())."""
    d, arr, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    rollout, kc, run_dir = arr.rollout, alg.kl_ctrl, tr.default_local_dir
    prompts_per_round = d.gen_batch_size or d.train_batch_size
    vk, pad_id, policy = rollout.val_kwargs, data.tokenizer.pad_token_id, roles.policy
    loop = loop_settings(cfg)
    sampler = PromptSampler(len(data.train), prompts_per_round, d.seed, d.shuffle)
    sampling = SamplingParams(max_new_tokens=d.max_response_length, temperature=rollout.temperature,
                              top_p=rollout.top_p, top_k=rollout.top_k, do_sample=rollout.do_sample,
                              ignore_eos=rollout.ignore_eos)
    inputs = RolloutInputs(train_data=data.train, sampler=sampler, pad_id=pad_id, policy=policy, sampling=sampling,
                           reward=reward)
    return RLRun(
        loop=loop, plan=plan, total_steps=data.total_steps, pad_id=pad_id, train_data=data.train,
        val_data=data.val, sampler=sampler,
        policy=policy, reference=roles.reference, critic=roles.critic, teacher=roles.teacher, workers=roles.workers,
        model_shape=policy.model_shape(),
        kl_ctrl=(KLController(value=kc.kl_coef, type=kc.type, target_kl=kc.target_kl, horizon=kc.horizon)
                 if alg.use_kl_in_reward else None),
        reward=reward,
        tracker=Tracker(tr.logger, run_dir, resume_step=resume.step if resume else None, project=tr.project_name,
                        experiment=tr.experiment_name, config=OmegaConf.to_container(OmegaConf.structured(cfg))),
        sampling=sampling,
        val_sampling=SamplingParams(max_new_tokens=d.max_response_length, temperature=vk.temperature, top_p=vk.top_p,
                                    top_k=vk.top_k, do_sample=vk.do_sample),
        adv_params=AdvantageParams(norm_adv_by_std_in_grpo=alg.norm_adv_by_std_in_grpo, gamma=alg.gamma, lam=alg.lam),
        run_dir=run_dir, tokenizer=data.tokenizer, resume=resume,
        checkpointing=Checkpointing(save_freq=tr.save_freq, keep_actor=tr.max_actor_ckpt_to_keep,
                                    keep_critic=tr.max_critic_ckpt_to_keep),
        # the rollout pool's queue only reads the run's parts: building it starts nothing
        source=rollout_source(cfg, inputs, n=loop.n, num_groups=plan.prompts_per_step, group_filter=loop.group_filter,
                              total_steps=data.total_steps, pool=getattr(roles.workers, "rollout", None), agent=agent),
    )
