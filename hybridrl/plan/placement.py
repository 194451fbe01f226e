"""Which role runs in which worker process: the resource pools of `trainer.backend=ray`.

By default every role shares the actor pool, `trainer.n_gpus_per_node * trainer.nnodes` workers
(verl's hybrid engine: rank r of the policy, reference and critic in worker r). A role can get its
own pool: the critic with `critic.enable_resource_pool` (`critic.n_gpus_per_node * critic.nnodes` workers; or
`critic.n_workers` workers that Ray places), the reward model with
`reward_model.enable_resource_pool` (`reward_model.n_gpus_per_node * reward_model.nnodes` workers;
otherwise it scores in the driver), the distillation teacher with `distillation.enable_resource_pool`
(`distillation.n_gpus_per_node * distillation.nnodes` workers; otherwise in the actor pool). Each pool is its own data-parallel process group.
Asynchronous training adds a rollout pool (`rollout.n_gpus_per_node * rollout.nnodes` workers, no process group).
"""

from __future__ import annotations

from hybridrl.config.async_checks import async_enabled, rollout_workers
from hybridrl.config.schema import RLConfig
from hybridrl.plan.roles import critic_pool_workers, needs_critic, needs_reference, needs_teacher


def pool_sizes(cfg: RLConfig) -> dict[str, int]:
    """Workers per pool: `actor`, and `critic` / `reward_model` / `teacher` when they have their own."""
    tr, rm, dist = cfg.trainer, cfg.reward_model, cfg.distillation
    sizes = {"actor": tr.n_gpus_per_node * tr.nnodes}
    if needs_critic(cfg) and critic_pool_workers(cfg) is not None:
        sizes["critic"] = critic_pool_workers(cfg)
    if rm.enable and rm.enable_resource_pool:
        sizes["reward_model"] = rm.n_gpus_per_node * rm.nnodes
    if needs_teacher(cfg) and dist.enable_resource_pool:
        sizes["teacher"] = dist.n_gpus_per_node * dist.nnodes
    if async_enabled(cfg):
        sizes["rollout"] = rollout_workers(cfg)
    return sizes


# the config section whose n_gpus_per_node x nnodes lays out each pool
LAYOUT_SECTION = {"actor": "trainer", "critic": "critic", "reward_model": "reward_model", "teacher": "distillation",
                  "rollout": "rollout"}


def per_node(cfg: RLConfig) -> dict[str, int]:
    """Workers per node of each pool laid out by its section's n_gpus_per_node x nnodes: rank r runs on the pool's
    node r // n (distributed/placement_group.spread_over_nodes makes it so). A critic pool given as
    critic.n_workers is absent: Ray places it wherever CPUs (GPUs) are free."""
    sizes = pool_sizes(cfg)
    counts = {"actor": cfg.trainer.n_gpus_per_node, "reward_model": cfg.reward_model.n_gpus_per_node,
              "teacher": cfg.distillation.n_gpus_per_node, "rollout": cfg.rollout.n_gpus_per_node}
    if cfg.critic.enable_resource_pool:
        counts["critic"] = cfg.critic.n_gpus_per_node
    return {pool: counts[pool] for pool in sizes if pool in counts}


def pool_roles(cfg: RLConfig) -> dict[str, tuple[str, ...]]:
    """The roles each pool's workers host."""
    sizes = pool_sizes(cfg)
    own_critic = "critic" in sizes
    roles = {"actor": ("policy",) + ("reference",) * needs_reference(cfg)
             + ("teacher",) * (needs_teacher(cfg) and "teacher" not in sizes)
             + ("critic",) * (needs_critic(cfg) and not own_critic)}
    if own_critic:
        roles["critic"] = ("critic",)
    if "reward_model" in sizes:
        roles["reward_model"] = ("reward_model",)
    if "teacher" in sizes:
        roles["teacher"] = ("teacher",)
    if "rollout" in sizes:
        roles["rollout"] = ("rollout",)
    return roles


def describe_placement(cfg: RLConfig) -> str:
    """Every role in this process (local), or each pool's workers with their ranks and nodes (ray)."""
    tr, rm = cfg.trainer, cfg.reward_model
    names = {"policy": f"policy (actor + {cfg.actor_rollout_ref.rollout.name} rollout engine)", "reference": "reference",
             "teacher": "distillation teacher", "critic": "critic", "reward_model": "reward model",
             "rollout": "rollout engine with its own weights (asynchronous training)"}
    if tr.backend == "local":
        held = [names[r] for r in pool_roles(cfg)["actor"]] + ["reward model"] * rm.enable
        return f"placement: backend=local, one process holds {', '.join(held)}"
    sizes, roles = pool_sizes(cfg), pool_roles(cfg)
    driver = "data, rewards" + (" (with the reward model)" if rm.enable and "reward_model" not in sizes else "")
    lines = [f"placement: backend=ray, {sum(sizes.values())} worker processes on {tr.device}; the driver keeps "
             f"{driver} and the loop"]
    layout = per_node(cfg)
    what = {"actor": f"strategy {cfg.actor_rollout_ref.actor.strategy}", "critic": f"strategy {cfg.critic.strategy}",
            "reward_model": "inference only", "teacher": "inference only", "rollout": "generation only"}
    for pool, size in sizes.items():
        lines.append(f"  {pool} pool: {size} worker(s), {what[pool]}")
        for r in range(size):
            node = f"node {r // layout[pool]}" if pool in layout else "node chosen by Ray"
            lines.append(f"    worker {r} ({node}): rank {r} of {', '.join(names[x] for x in roles[pool])}")
    return "\n".join(lines)
