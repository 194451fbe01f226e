"""Semantic checks that types alone cannot express, run once right after parsing."""

from __future__ import annotations

from hybridrl.algos.advantages import ADV_ESTIMATORS
from hybridrl.algos.kl import KL_ESTIMATORS
from hybridrl.algos.policy_losses import POLICY_LOSSES
from hybridrl.algos.reduce import LOSS_AGG_MODES
from hybridrl.config.plan import BatchPlan, make_batch_plan
from hybridrl.config.schema import RLConfig
from hybridrl.data.dataset import TRUNCATION_MODES
from hybridrl.errors import ConfigError
from hybridrl.trainer.optim import WARMUP_STYLES
from hybridrl.trainer.tracking import LOGGERS

ROLLOUT_ENGINES = ("hf",)


def check_choice(key: str, value: str, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not supported; valid values: {', '.join(choices)}")


def validate_rl_config(cfg: RLConfig) -> BatchPlan:
    """Raise ConfigError on the first problem; return the batch plan."""
    d, arr, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    actor, rollout = arr.actor, arr.rollout
    check_choice("data.truncation", d.truncation, TRUNCATION_MODES)
    check_choice("actor_rollout_ref.rollout.name", rollout.name, ROLLOUT_ENGINES)
    check_choice("actor_rollout_ref.actor.optim.warmup_style", actor.optim.warmup_style, WARMUP_STYLES)
    for name in tr.logger:
        check_choice("trainer.logger", name, LOGGERS)
    estimator = ADV_ESTIMATORS.entry(alg.adv_estimator)
    LOSS_AGG_MODES.entry(actor.loss_agg_mode)
    POLICY_LOSSES.entry(actor.policy_loss.loss_mode)
    if actor.loss_scale_factor is not None and actor.loss_scale_factor <= 0:
        raise ConfigError(f"actor_rollout_ref.actor.loss_scale_factor={actor.loss_scale_factor} must be > 0 (or null)")
    if not 0.0 < alg.gamma <= 1.0:
        raise ConfigError(f"algorithm.gamma={alg.gamma} must be in (0, 1]")
    if actor.use_kl_loss:
        KL_ESTIMATORS.entry(actor.kl_loss_type)
    if estimator.meta.get("needs_groups") and rollout.n < 2:
        raise ConfigError(
            f"algorithm.adv_estimator={alg.adv_estimator} compares the responses to one prompt, so it needs "
            f"actor_rollout_ref.rollout.n >= 2 (got {rollout.n}); set actor_rollout_ref.rollout.n=8, for example"
        )
    if actor.clip_ratio_c <= 1.0:
        raise ConfigError(f"actor_rollout_ref.actor.clip_ratio_c={actor.clip_ratio_c} must be > 1 (verl uses 3.0)")
    if rollout.do_sample and rollout.temperature <= 0:
        raise ConfigError("actor_rollout_ref.rollout.temperature must be > 0 when do_sample=true (or set do_sample=false)")
    if not 0.0 < rollout.top_p <= 1.0:
        raise ConfigError(f"actor_rollout_ref.rollout.top_p={rollout.top_p} must be in (0, 1]")
    for key, value in [("data.max_prompt_length", d.max_prompt_length), ("data.max_response_length", d.max_response_length),
                       ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", rollout.log_prob_micro_batch_size_per_gpu),
                       ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", arr.ref.log_prob_micro_batch_size_per_gpu),
                       ("actor_rollout_ref.rollout.val_kwargs.n", rollout.val_kwargs.n)]:
        if value < 1:
            raise ConfigError(f"{key}={value} must be at least 1")
    if tr.n_gpus_per_node * tr.nnodes != 1:
        raise ConfigError(
            f"trainer.n_gpus_per_node * trainer.nnodes = {tr.n_gpus_per_node * tr.nnodes}: this version trains with one "
            "worker in-process; set trainer.n_gpus_per_node=1 trainer.nnodes=1"
        )
    return make_batch_plan(d.train_batch_size, rollout.n, actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu,
                           actor.ppo_epochs, tr.n_gpus_per_node * tr.nnodes)
