"""trainer.nnodes over several Ray nodes: each pool laid out as n_gpus_per_node x nnodes puts rank r on its node
r // n_gpus_per_node, every node a different one (distributed/placement_group.spread_over_nodes), as `plan` says.
A cluster that cannot host the layout is refused at once, naming the keys. Two raylets on this machine
(ray.cluster_utils.Cluster): placement is Ray's scheduling, which a real second machine does not change
(test_ray_two_node.py trains across real ones)."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.plan.resolve import validate_rl_config  # noqa: E402
from hybridrl.distributed.group import RayRoles  # noqa: E402
from hybridrl.errors import ConfigError  # noqa: E402
from hybridrl.models.loading import load_tokenizer, resolve_model_path  # noqa: E402
from test_ray import overrides  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_raylets():
    """Two Ray nodes of 2 CPUs each, this process their driver."""
    assert not ray.is_initialized()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def roles(arith_data, tmp_path, *extra: str) -> RayRoles:
    cfg = load_config(RLConfig, None, overrides(arith_data, tmp_path, "trainer.backend=ray", *extra))
    pad_id = load_tokenizer(resolve_model_path("tiny-arith")).pad_token_id
    return RayRoles(cfg, validate_rl_config(cfg), 3, pad_id, log=lambda *_: None)


def test_each_nodes_ranks_share_a_node_and_the_nodes_differ(two_raylets, arith_data, tmp_path):
    """2 x 2: ranks 0-1 on one node, 2-3 on the other. Left to Ray (no placement group; checked), the ranks
    alternated between the nodes: 0 and 2 on one, 1 and 3 on the other, not what `plan` printed."""
    ranks = roles(arith_data, tmp_path, "trainer.n_gpus_per_node=2", "trainer.nnodes=2",
                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2")
    try:
        nodes = ranks.nodes("actor")
        assert nodes[0] == nodes[1] and nodes[2] == nodes[3] and nodes[0] != nodes[2], nodes
        assert len(ray.util.placement_group_table()) >= 1
    finally:
        ranks.close()
    live = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
    assert not live, live  # close() gave the nodes' CPUs back


@pytest.mark.parametrize("layout, message", [
    (["trainer.n_gpus_per_node=1", "trainer.nnodes=3", "data.train_batch_size=6",
      "actor_rollout_ref.actor.ppo_mini_batch_size=6"],
     r"^the actor pool \(trainer\.n_gpus_per_node=1 x trainer\.nnodes=3\) needs 1 CPU on each of 3 different nodes; "
     r"the Ray cluster has 2 alive node\(s\), 2 with that much \(CPUs per node: 2, 2\): start Ray on more nodes"),
    # 3 workers fit the cluster's 4 CPUs, but not one node's 2
    (["trainer.n_gpus_per_node=3", "data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=6"],
     r"^the actor pool \(trainer\.n_gpus_per_node=3 x trainer\.nnodes=1\) needs 3 CPU on one node; the Ray cluster "
     r"has 2 alive node\(s\), 0 with that much \(CPUs per node: 2, 2\): .*or lower trainer\.nnodes / "
     r"trainer\.n_gpus_per_node$"),
])
def test_a_layout_the_cluster_cannot_host_is_refused_at_once(two_raylets, arith_data, tmp_path, layout, message):
    with pytest.raises(ConfigError, match=message):
        roles(arith_data, tmp_path, *layout)
