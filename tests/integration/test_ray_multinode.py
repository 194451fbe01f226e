"""trainer.backend=ray on a two-node cluster (Ray's cluster utilities, both nodes on this machine):
one worker per node, and the run trains. Its own module: it needs Ray not yet started."""

from __future__ import annotations

import json
import os

import pytest

ray = pytest.importorskip("ray")

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.config.validate import validate_rl_config  # noqa: E402
from hybridrl.trainer.build import build_run  # noqa: E402
from hybridrl.trainer.rl import RLTrainer  # noqa: E402
from test_ray import overrides  # noqa: E402

pytestmark = pytest.mark.slow


def test_workers_land_on_both_nodes_of_a_two_node_cluster(arith_data, tmp_path):
    from ray.cluster_utils import Cluster

    assert not ray.is_initialized()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    two = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    two.add_node(num_cpus=1)
    try:
        lines = []
        cfg = load_config(RLConfig, None, overrides(arith_data, tmp_path, "trainer.backend=ray",
                                                    "trainer.n_gpus_per_node=1", "trainer.nnodes=2",
                                                    f"ray_kwargs.ray_init.address={two.address}"))
        run = build_run(cfg, validate_rl_config(cfg), log=lines.append)
        nodes = run.workers.nodes()
        assert len(set(nodes)) == 2  # one worker per node: each node has one CPU
        RLTrainer(run, log=lambda *_: None).fit()
        records = [json.loads(line) for line in open(run.tracker.path)]
        assert [r["step"] for r in records] == [0, 1, 2, 3]
        assert max(r.get("actor/grad_norm", 0.0) for r in records) > 0  # an update happened on both nodes
        assert any("on 2 node(s)" in line for line in lines)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        two.shutdown()
