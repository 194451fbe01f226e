"""The other roles' config sections: `critic`, `reward_model`, `custom_reward_function` and
`distillation` (verl's names and units)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hybridrl.config.fields import ON_ERROR, REWARD_MANAGERS, STRATEGIES, doc
from hybridrl.config.schema_policy import FSDPConfig, OptimConfig

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
    enable_resource_pool: bool = doc(False, "backend=ray: the critic in its own pool of critic.n_gpus_per_node * "
                                            "critic.nnodes workers, laid out per node as the actor's (false: rank r "
                                            "beside the policy's rank r, or critic.n_workers)")
    n_gpus_per_node: int = doc(0, "critic workers per node (enable_resource_pool=true)", ge=0)
    nnodes: int = doc(0, "nodes of the critic pool (enable_resource_pool=true)", ge=0)
    n_workers: Optional[int] = doc(None, "backend=ray: the critic in its own pool of this many workers, placed by "
                                         "Ray (shorthand for enable_resource_pool; null: in the policy's workers, "
                                         "one rank each)", ge=1)


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
