"""Typed RL config. Key names and units follow verl (`data.train_batch_size` counts prompts,
`*_micro_batch_size_per_gpu` counts responses per worker), so a verl command line works for
every key we support. Defaults follow verl for algorithm settings; sizes, model, data and
learning rate default to the built-in run (GRPO on arithmetic with the bundled tiny model).

Each field's `doc(...)` text becomes `hybridrl train --help`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hybridrl.algos.kl_ctrl_types import KL_CTRL_TYPES  # noqa: F401  re-exported: the controller checks with them
from hybridrl.config.fields import (  # noqa: F401  re-exported: the valid values are imported from here too
    BACKENDS, DEVICES, FILTER_METRICS, LEGACY_WORKER_IMPL, ON_ERROR, RESUME_MODES, REWARD_MANAGERS,
    ROLLOUT_DTYPES, ROLLOUT_ENGINES, SEED_MAX, STRATEGIES, TRUNCATION_MODES, WARMUP_STYLES, doc)
from hybridrl.config.schema_policy import (  # noqa: F401  re-exported
    ActorConfig, ActorRolloutRefConfig, EngineKwargs, FSDPConfig, MixedPrecisionConfig, ModelConfig,
    MultiTurnConfig, OptimConfig, PolicyLossConfig, RefConfig, RefFSDPConfig, RefMixedPrecisionConfig,
    RolloutConfig, ValKwargs)
from hybridrl.config.schema_async import AsyncTrainingConfig, RolloutPoolConfig  # noqa: F401  re-exported
from hybridrl.config.schema_roles import (  # noqa: F401  re-exported
    CriticConfig, CriticModelConfig, CustomRewardFunctionConfig, DistillationConfig, DistillationLossConfig,
    OverlongBufferConfig, RewardModelConfig, RewardModelModelConfig, TeacherModelConfig)


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
    total_training_steps: Optional[int] = doc(200, "stop after this many steps (null: total_epochs decides); 200: "
                                                   "the bundled run gains >= 35 points on every seed measured, in "
                                                   "under 90 s on 2 quiet cores (bench/default_run.py)", ge=1)
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
    profile_timeline: Optional[str] = doc(None, "write a phase timeline of the run to this JSON file (Chrome trace: "
                                                "open it in ui.perfetto.dev): a span per driver phase, and with "
                                                "backend=ray per worker call, one track per process (null: off)")
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
    rollout: RolloutPoolConfig = field(default_factory=RolloutPoolConfig)  # async: the separate rollout pool
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)
