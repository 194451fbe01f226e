"""The critic on a pool of its own (critic.enable_resource_pool with critic.n_gpus_per_node x critic.nnodes, the
reward model's and teacher's keys: "actor on devices 0-3, critic on 4-7") trains exactly like
the critic colocated in the actor's workers (issue #38 part 3): the default PPO task on trainer.backend=ray, one
data-parallel rank per role in both runs, the same metrics step for step, the critic's and the actor's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.plan.resolve import resolve  # noqa: E402
from hybridrl.trainer.build import build_run  # noqa: E402
from hybridrl.trainer.rl import RLTrainer  # noqa: E402
from test_ray import overrides, read_metrics  # noqa: E402

pytestmark = pytest.mark.slow

PPO = str(Path(__file__).resolve().parents[2] / "examples" / "arithmetic_ppo.yaml")
# each run starts a Ray instance of its own, one CPU per worker: 1 torch thread per worker in both runs (RayRoles
# gives each worker the cluster's CPUs / its workers), so the critic's sums run in the same order wherever it is
RAY = ["trainer.backend=ray", "trainer.n_gpus_per_node=1", "trainer.worker_timeout_s=120"]
COLOCATED = ["ray_kwargs.ray_init.num_cpus=1"]  # 1 worker: policy + critic
OWN_POOL = ["ray_kwargs.ray_init.num_cpus=2", "critic.enable_resource_pool=true", "critic.n_gpus_per_node=1",
            "critic.nnodes=1"]  # 1 policy worker + 1 critic worker


def train_ppo(args: list[str]) -> tuple[list[dict], dict]:
    """(metrics per step, {pool: its workers' roles}) of the PPO example with `args`."""
    cfg = load_config(RLConfig, PPO, args)
    run = build_run(resolve(cfg), log=lambda *_: None)
    pools = {name: (p.world, p.roles) for name, p in run.workers.pools.items()}
    RLTrainer(run, log=lambda *_: None).fit()
    return read_metrics(run.tracker.path), pools


def test_the_critic_on_its_own_pool_trains_exactly_like_the_colocated_critic(arith_data, tmp_path):
    assert not ray.is_initialized()  # each run starts (and ends) its own instance, of its own size
    colocated, placed = train_ppo(overrides(arith_data, tmp_path / "colocated", *RAY, *COLOCATED))
    assert placed == {"actor": (1, ("policy", "critic"))}
    own, placed = train_ppo(overrides(arith_data, tmp_path / "own", *RAY, *OWN_POOL))
    assert placed == {"actor": (1, ("policy",)), "critic": (1, ("critic",))}

    assert [r["step"] for r in own] == [r["step"] for r in colocated] == [0, 1, 2, 3]
    critic = ("critic/vf_loss", "critic/grad_norm", "critic/values/mean", "critic/vpred_mean")
    for step in (1, 2, 3):  # the critic learns: its loss and values move, its gradient is not zero
        assert all(key in colocated[step] for key in critic + ("actor/pg_loss", "actor/grad_norm"))
        assert colocated[step]["critic/grad_norm"] > 0 and math.isfinite(colocated[step]["critic/vf_loss"])
    assert colocated[3]["critic/values/mean"] != colocated[1]["critic/values/mean"]
    # exact: the same rank computes the same batches with one torch thread in both runs; only the process differs
    assert own == colocated
