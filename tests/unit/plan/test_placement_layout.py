"""plan/placement.per_node: the per-node layout of each pool that distributed/placement_group.spread_over_nodes
makes real and `plan` prints ("worker r (node r // n)")."""

from __future__ import annotations

from hybridrl.config.loader import load_config
from hybridrl.plan.placement import LAYOUT_SECTION, per_node, pool_sizes
from hybridrl.config.schema import RLConfig


def layout(*overrides: str) -> dict[str, int]:
    return per_node(load_config(RLConfig, None, ["trainer.backend=ray", *overrides]))


def test_each_pool_is_laid_out_by_its_own_sections_count_per_node():
    assert layout("trainer.n_gpus_per_node=2", "trainer.nnodes=2") == {"actor": 2}
    cfg = load_config(RLConfig, None, [
        "trainer.backend=ray", "trainer.n_gpus_per_node=4", "trainer.nnodes=2", "algorithm.adv_estimator=gae",
        "critic.enable_resource_pool=true", "critic.n_gpus_per_node=3", "critic.nnodes=2",
        "reward_model.enable=true", "reward_model.enable_resource_pool=true", "reward_model.n_gpus_per_node=1",
        "reward_model.nnodes=2"])
    assert per_node(cfg) == {"actor": 4, "critic": 3, "reward_model": 1}
    assert pool_sizes(cfg) == {"actor": 8, "critic": 6, "reward_model": 2}  # per node x nnodes
    assert {pool: LAYOUT_SECTION[pool] for pool in per_node(cfg)} == {
        "actor": "trainer", "critic": "critic", "reward_model": "reward_model"}


def test_a_critic_pool_given_as_n_workers_is_left_to_ray():
    out = layout("trainer.n_gpus_per_node=2", "algorithm.adv_estimator=gae", "critic.n_workers=3")
    assert out == {"actor": 2}  # the critic pool (3 workers) has no per-node layout
