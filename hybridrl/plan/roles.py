"""Which roles a config builds and how the critic batches: pure functions of the config, below the
checks (checks.py), the micro-batch derivation (derive.py) and the memory estimate (memory.py), which
all read them."""

from __future__ import annotations

from typing import Optional

from hybridrl.algos.advantages import ADV_ESTIMATORS
from hybridrl.algos.policy_losses import PolicyLossParams
from hybridrl.plan.batch_plan import MICRO_CAP, BatchPlan, make_batch_plan
from hybridrl.config.schema import ActorConfig, RLConfig


def needs_reference(cfg: RLConfig) -> bool:
    """A frozen reference model is built only for a KL term (in the loss or in the reward)."""
    return cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward


def needs_teacher(cfg: RLConfig) -> bool:
    """A frozen teacher model is built only for on-policy distillation."""
    return cfg.distillation.enabled


def needs_critic(cfg: RLConfig) -> bool:
    """A critic is built only for estimators that use values (gae)."""
    return bool(ADV_ESTIMATORS.entry(cfg.algorithm.adv_estimator).meta.get("needs_critic", False))


def critic_pool_workers(cfg: RLConfig) -> Optional[int]:
    """Workers of the critic's own pool: critic.n_gpus_per_node * critic.nnodes with critic.enable_resource_pool
    (the reward model's and the teacher's pattern), or critic.n_workers; None: the critic shares the actor pool.
    (Validation refuses both at once.)"""
    c = cfg.critic
    return c.n_gpus_per_node * c.nnodes if c.enable_resource_pool else c.n_workers


def critic_pool_key(cfg: RLConfig) -> str:
    """The keys that size the critic's own pool, for messages."""
    return "critic.n_gpus_per_node * critic.nnodes" if cfg.critic.enable_resource_pool else "critic.n_workers"


def critic_world_size(cfg: RLConfig) -> int:
    """The critic's data-parallel ranks: its own pool's, else one per policy worker."""
    tr, own = cfg.trainer, critic_pool_workers(cfg)
    return own if own is not None else tr.n_gpus_per_node * tr.nnodes


def critic_batch_plan(cfg: RLConfig) -> BatchPlan:
    """The critic's mini/micro-batches; each `critic.*` size left null follows the actor's, but the
    micro-batch: a null one is the largest divisor of a critic worker's share up to the actor's size
    (the actor's own when the shares are equal), noted in the plan's `derived`."""
    actor, c = cfg.actor_rollout_ref.actor, cfg.critic
    pick = lambda own, actors: actors if own is None else own  # noqa: E731
    return make_batch_plan(cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n,
                           pick(c.ppo_mini_batch_size, actor.ppo_mini_batch_size), c.ppo_micro_batch_size_per_gpu,
                           pick(c.ppo_epochs, actor.ppo_epochs), critic_world_size(cfg), role="critic",
                           world_key=critic_pool_key(cfg) if critic_pool_workers(cfg) is not None else
                           "trainer.n_gpus_per_node * trainer.nnodes",
                           micro_cap=actor.ppo_micro_batch_size_per_gpu or MICRO_CAP)


def actor_plan(cfg: RLConfig) -> BatchPlan:
    """The policy's batch plan from the config as it stands (its micro-batch size derived if null)."""
    d, arr, tr = cfg.data, cfg.actor_rollout_ref, cfg.trainer
    return make_batch_plan(d.train_batch_size, arr.rollout.n, arr.actor.ppo_mini_batch_size,
                           arr.actor.ppo_micro_batch_size_per_gpu, arr.actor.ppo_epochs, tr.n_gpus_per_node * tr.nnodes)


def policy_loss_params(actor: ActorConfig) -> PolicyLossParams:
    """The policy loss's parameters from the actor's keys (verl: clip_ratio is both bounds unless clip_ratio_low /
    clip_ratio_high are set); the one place the update (workers/build.py) and `check` (plan/inert_keys.py) read
    them from."""
    return PolicyLossParams(
        clip_ratio_low=actor.clip_ratio if actor.clip_ratio_low is None else actor.clip_ratio_low,
        clip_ratio_high=actor.clip_ratio if actor.clip_ratio_high is None else actor.clip_ratio_high,
        clip_ratio_c=actor.clip_ratio_c, tau_pos=actor.tau_pos, tau_neg=actor.tau_neg)
