"""The cross-key checks that need more than the config's own keys: which roles the config builds (plan/roles.py)
and their batch plans, the backend and the pools, the memory and precision levers, and the user's tool and agent
files, which are loaded now so that a bad one fails before the first step. check_rl_config runs these and the
config-only checks (config/validate.py) in one sequence, keeping every problem; a check that needs an earlier one
to have passed (the critic's batch plan needs a known advantage estimator) is skipped when that one failed.
"""

from __future__ import annotations

import importlib.util

from hybridrl.algos.advantages import ADV_ESTIMATORS
from hybridrl.config.agent_checks import KEY, agent_conflicts
from hybridrl.config.async_checks import check_async
from hybridrl.config.choice_keys import check_choice_keys
from hybridrl.config.loggers import check_loggers
from hybridrl.config.schema import RLConfig
from hybridrl.config.validate import (
    Problems,
    check_checkpointing,
    check_custom_reward_file,
    check_dapo,
    check_distillation,
    check_lora,
    check_own_pool,
    check_reward,
    check_sampling,
    check_vllm,
)
from hybridrl.errors import ConfigError, messages_of, raise_all
from hybridrl.plan.levers import check_levers
from hybridrl.plan.roles import actor_plan, critic_batch_plan, critic_world_size, needs_critic, needs_reference, needs_teacher


def check_rl_config(cfg: RLConfig, problems: Problems) -> bool:
    """Run every cross-key check on `cfg` (its `auto` precision and backend already resolved: plan/resolve.py),
    recording problems; True when the batch sizes are valid and nothing failed, so the micro-batch sizes can be
    derived."""
    check = problems.check
    alg = cfg.algorithm
    for fn in (check_custom_reward_file, check_reward, check_checkpointing, _check_multi_turn, check_sampling,
               check_dapo, check_vllm, check_distillation, check_async, check_agent):
        check(fn, cfg)
    check(check_loggers, cfg.trainer.logger)
    check(check_choice_keys, cfg)  # every registry name, whether or not its switch is on
    if alg.adv_estimator not in ADV_ESTIMATORS:
        return False  # which roles exist (critic, reference) and so everything below depends on it
    batches_ok = check(_check_estimator, cfg)
    for fn in (_check_backend, _check_lora_sections):
        check(fn, cfg)
    check(check_levers, cfg, needs_critic(cfg), uses_reference_pass(cfg))
    return batches_ok and not problems.errors  # the memory fit reads every role's settings: only a valid config


def uses_reference_pass(cfg: RLConfig) -> bool:
    """A reference-style log-prob pass runs: the reference's, or the teacher's, which is batched by the
    reference's keys (workers/build.py build_teacher)."""
    return needs_reference(cfg) or needs_teacher(cfg)


def _check_multi_turn(cfg: RLConfig) -> None:
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    if not mt.enable:
        return
    key = "actor_rollout_ref.rollout.multi_turn"
    if not mt.tool_config_path:
        raise ConfigError(f"{key}.enable=true needs {key}.tool_config_path (a YAML file listing the tools; "
                          "see examples/tool_calc/tools.yaml)")
    from hybridrl.rollout.tools.loading import load_tools

    load_tools(mt.tool_config_path)  # a bad file or class fails now, not at the first rollout



def check_agent(cfg: RLConfig) -> None:
    """With agent.path set: the function loads and is `async def agent(client, row)`, and nothing conflicts."""
    agent = cfg.actor_rollout_ref.rollout.agent
    if agent.path is None:
        return
    from hybridrl.rollout.agent.loading import load_agent

    errors = agent_conflicts(cfg, f"{KEY}.path")
    try:
        load_agent(agent.path, agent.name)  # a missing file or a wrong function fails now, not at the first step
    except ConfigError as e:
        errors = messages_of(e) + errors  # every problem at once
    raise_all(errors)


def _check_estimator(cfg: RLConfig) -> None:
    """The advantage estimator's needs: groups of responses, or a critic (with its own batch plan)."""
    alg, tr, rollout = cfg.algorithm, cfg.trainer, cfg.actor_rollout_ref.rollout
    problems = Problems()
    groups = ADV_ESTIMATORS.entry(alg.adv_estimator).meta.get("needs_groups")
    if groups and rollout.n < 2:
        problems.errors.append(
            f"algorithm.adv_estimator={alg.adv_estimator} compares the responses to one prompt, so it needs "
            f"actor_rollout_ref.rollout.n >= 2 (got {rollout.n}); set actor_rollout_ref.rollout.n=8, for example")
    elif groups and not rollout.do_sample:  # greedy: the group's responses are one response n times
        problems.errors.append(
            f"actor_rollout_ref.rollout.do_sample=false gives the {rollout.n} responses to a prompt the same tokens, so "
            f"algorithm.adv_estimator={alg.adv_estimator} (which compares them) gives every one advantage 0 and "
            "nothing is learned; set actor_rollout_ref.rollout.do_sample=true")
    problems.check(actor_plan, cfg)
    c = cfg.critic
    # a critic pool sized wrong (none, or two ways) is _check_pools' one message, not also a batch plan's
    if needs_critic(cfg) and not (c.enable_resource_pool and (c.n_workers is not None
                                                             or c.n_gpus_per_node * c.nnodes < 1)):
        problems.check(critic_batch_plan, cfg)
    elif tr.critic_warmup:
        problems.errors.append(
            f"trainer.critic_warmup={tr.critic_warmup} needs a critic, but algorithm.adv_estimator={alg.adv_estimator} "
            "uses none; set algorithm.adv_estimator=gae or trainer.critic_warmup=0")
    raise_all(problems.errors)


def _check_backend(cfg: RLConfig) -> None:
    tr = cfg.trainer
    if tr.backend == "local" and tr.n_gpus_per_node * tr.nnodes != 1:
        raise ConfigError(
            f"trainer.n_gpus_per_node * trainer.nnodes = {tr.n_gpus_per_node * tr.nnodes} with trainer.backend=local, "
            "which trains in this one process; set trainer.backend=ray for several workers, or "
            "trainer.n_gpus_per_node=1 trainer.nnodes=1")
    if tr.device == "cuda" and tr.backend == "local":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("trainer.device=cuda but torch sees no GPU here (torch.cuda.is_available() is false: a "
                              "CPU build of torch, or no driver); set trainer.device=cpu")
    _check_pools(cfg)
    if tr.backend == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError("trainer.backend=ray needs the ray package: pip install 'ray>=2.40' (or pip install "
                          "'hybridrl[ray]'), or set trainer.backend=local")


def _check_pools(cfg: RLConfig) -> None:
    """A role in its own resource pool (backend=ray only)."""
    tr, c, rm = cfg.trainer, cfg.critic, cfg.reward_model
    if c.enable_resource_pool:
        if c.n_workers is not None:
            raise ConfigError(f"critic.enable_resource_pool=true and critic.n_workers={c.n_workers} both size the "
                              "critic's own pool; give one: critic.n_gpus_per_node and critic.nnodes (laid out per "
                              "node), or critic.n_workers alone")
        if not needs_critic(cfg):
            raise ConfigError(f"critic.enable_resource_pool=true but algorithm.adv_estimator="
                              f"{cfg.algorithm.adv_estimator} uses no critic; remove it (or set "
                              "algorithm.adv_estimator=gae)")
        check_own_pool("critic", "", True, "the critic", tr.backend, c.n_gpus_per_node, c.nnodes)
    if c.n_workers is not None:
        if not needs_critic(cfg):
            raise ConfigError(f"critic.n_workers={c.n_workers} gives the critic its own workers, but "
                              f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} uses no critic; remove "
                              "critic.n_workers (or set algorithm.adv_estimator=gae)")
        if tr.backend != "ray":
            raise ConfigError(f"critic.n_workers={c.n_workers} puts the critic in its own worker processes, which "
                              "needs trainer.backend=ray; set it, or remove critic.n_workers")
    if rm.enable_resource_pool:
        check_own_pool("reward_model", "reward_model.enable", rm.enable, "the reward model", tr.backend,
                        rm.n_gpus_per_node, rm.nnodes)
    d = cfg.distillation
    if d.enable_resource_pool:
        check_own_pool("distillation", "distillation.enabled", d.enabled, "the teacher", tr.backend,
                        d.n_gpus_per_node, d.nnodes)


def _check_lora_sections(cfg: RLConfig) -> None:
    """LoRA on the policy (actor_rollout_ref.model.lora_*) and on the value model (critic.model.lora_*)."""
    tr, arr = cfg.trainer, cfg.actor_rollout_ref
    check_lora(arr.model, "actor_rollout_ref.model", "actor_rollout_ref.actor.strategy", arr.actor.strategy,
                tr.n_gpus_per_node * tr.nnodes)
    if needs_critic(cfg):  # like every critic.* key, read only when there is a critic
        check_lora(cfg.critic.model, "critic.model", "critic.strategy", cfg.critic.strategy, critic_world_size(cfg))
