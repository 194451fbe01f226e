"""trainer.backend=ray with every role placed apart and sharded: a 2-worker actor pool (policy +
reference, actor.strategy=fsdp2), a 2-worker critic pool (critic.n_workers=2, critic.strategy=fsdp2)
and a 1-worker reward-model pool (reward_model.enable_resource_pool). It trains like one process,
each pool hosts only its roles in its own process group, and a checkpoint written through the
sharded roles resumes to the uninterrupted run. Its own module: it needs a 5-CPU Ray instance."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.plan.resolve import resolve  # noqa: E402
from hybridrl.trainer.build import build_run  # noqa: E402
from hybridrl.trainer.rl import RLTrainer  # noqa: E402
from run_helpers import cut_back  # noqa: E402
from test_ray import assert_trains_like, overrides, read_metrics, train  # noqa: E402

pytestmark = pytest.mark.slow


RAY_CPUS = 5  # the `cluster` fixture's size (tests/conftest.py): actor 2 + critic 2 + reward model 1 workers


def algorithm(reward_model_dir: str) -> list[str]:
    return ["algorithm.adv_estimator=gae", "critic.optim.lr=1e-3", "actor_rollout_ref.actor.use_kl_loss=true",
            "reward_model.enable=true", f"reward_model.model.path={reward_model_dir}", "reward_model.rm_weight=0.5",
            "reward_model.rule_weight=1.0"]


PLACED = ["trainer.backend=ray", "trainer.n_gpus_per_node=2", "trainer.worker_timeout_s=180",
          "actor_rollout_ref.actor.strategy=fsdp2", "critic.strategy=fsdp2", "critic.n_workers=2",
          "reward_model.enable_resource_pool=true", "reward_model.n_gpus_per_node=1", "reward_model.nnodes=1"]


SAVE = "trainer.save_freq=2"  # the step-2 checkpoint the resume starts from, and the last step's


def test_placed_and_sharded_roles_train_like_one_process_and_resume(arith_data, tmp_path, cluster, reward_model_dir):
    """Tolerances as in test_ray.py (rel 1e-4: summation order across ranks; clip fractions abs 0.02)."""
    algo = algorithm(reward_model_dir)
    local = train(overrides(arith_data, tmp_path / "local", *algo))

    cfg = load_config(RLConfig, None, overrides(arith_data, tmp_path / "placed", *algo, *PLACED, SAVE))
    run = build_run(resolve(cfg), log=lambda *_: None)
    pools = run.workers.pools
    assert {name: (p.world, p.roles) for name, p in pools.items()} == {
        "actor": (2, ("policy", "reference")), "critic": (2, ("critic",)), "reward_model": (1, ("reward_model",))}
    assert len({(p.address, p.port) for p in pools.values()}) == 3  # each pool is its own process group
    assert run.reward.reward_model is run.workers.reward_model  # the driver scores through the pool
    RLTrainer(run, log=lambda *_: None).fit()
    placed = read_metrics(run.tracker.path)
    assert_trains_like(local, placed)
    assert local[1]["critic/grad_norm"] > 0 and local[3]["actor/kl_loss"] > 0
    assert local[3]["critic/score/mean"] != local[1]["critic/score/mean"]

    # the placed run, cut back to its step-2 checkpoint as a crash would leave it (a copy: one placed run fewer)
    cut = tmp_path / "cut"
    cut_back(tmp_path / "placed", cut, last=3, keep=2)
    resumed = train(overrides(arith_data, cut, *algo, *PLACED, SAVE))
    assert [r["step"] for r in resumed] == [0, 1, 2, 3]
    for a, b in zip(placed, resumed):
        for key, value in a.items():
            assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-8), (a["step"], key)
