"""Sweep trials with trainer.backend=ray: their placement-group bundles and what they need, from the config,
with hand-counted workers; the check that a run's workers are inside its placement group."""

import pytest

from hybridrl.plan.memory import MIB, RUNTIME_BYTES, estimate_memory
from hybridrl.plan.resolve import load_rl_config
from hybridrl.distributed.placement_group import check_same_group
from hybridrl.errors import ConfigErrors, HybridRLError
from hybridrl.sweep.check import check_sweep
from hybridrl.sweep.resources import Machine, derive_concurrency, trial_bundles, trial_needs
from hybridrl.sweep.spec import parse_sweep

GIB = 1024 * MIB
DRIVER, WORKER = {"CPU": 1, "GPU": 0}, {"CPU": 1, "GPU": 0}
GAE_RAY = {"algorithm.adv_estimator": "gae", "trainer.backend": "ray", "trainer.n_gpus_per_node": 2}


def test_a_local_trial_is_one_bundle():
    cfg, _ = load_rl_config(None, [], {})
    assert trial_bundles(cfg) == [DRIVER]


def test_a_ray_trial_has_its_driver_and_every_pools_workers():
    # actor pool 2 + critic pool 1 -> the driver's bundle + 3
    cfg, _ = load_rl_config(None, [], {**GAE_RAY, "critic.n_workers": 1})
    assert trial_bundles(cfg) == [DRIVER] + [WORKER] * 3
    # the critic colocated in the actor pool: no worker of its own -> 1 + 2
    cfg, _ = load_rl_config(None, [], GAE_RAY)
    assert trial_bundles(cfg) == [DRIVER] + [WORKER] * 2
    # a reward-model pool of 1 beside actor 2 + critic 1 -> 1 + 4
    cfg, _ = load_rl_config(None, [], {**GAE_RAY, "critic.n_workers": 1, "reward_model.enable": True,
                                       "reward_model.enable_resource_pool": True, "reward_model.n_gpus_per_node": 1,
                                       "reward_model.nnodes": 1, "reward_model.model.path": "tiny-arith"})
    assert len(trial_bundles(cfg)) == 5


def test_on_cuda_each_worker_bundle_holds_a_gpu_and_the_drivers_none():
    cfg, _ = load_rl_config(None, [], {**GAE_RAY, "critic.n_workers": 1})
    cfg.trainer.device = "cuda"  # set after validation: this machine may have no GPU
    assert trial_bundles(cfg) == [{"CPU": 1, "GPU": 0}] + [{"CPU": 1, "GPU": 1}] * 3


def test_a_ray_trial_needs_a_core_per_process_and_the_memory_of_all_of_them():
    cfg, plan = load_rl_config(None, [], {**GAE_RAY, "critic.n_workers": 1})
    actor, critic = estimate_memory(cfg, plan).pools
    need = trial_needs(cfg, plan)
    # 2 actor workers + 1 critic worker at their peaks, and the driver's own runtime
    assert (need.cpus, need.gpus) == (4, 0)
    assert need.memory_bytes == 2 * actor.peak_bytes + critic.peak_bytes + RUNTIME_BYTES
    # 8 cores / 4 per trial = 2 trials at once, though the RAM would allow more
    got = derive_concurrency(need, Machine(cores=8, gpus=0, ram_bytes=1024 * GIB), trials=6)
    assert got.trials == 2 and "8 cores / 4 per trial = 2" in got.why


def test_workers_outside_the_drivers_placement_group_are_an_error_naming_them():
    check_same_group("pg1", {"actor": ["pg1", "pg1"], "critic": ["pg1"]})
    check_same_group(None, {"actor": [None]})  # a run alone: no placement group anywhere
    with pytest.raises(HybridRLError, match=r"worker\(s\) critic rank 0 \(none\) are not in the run's placement "
                                            r"group \(pg1\)"):
        check_same_group("pg1", {"actor": ["pg1", "pg1"], "critic": [None]})


def test_a_ray_base_is_accepted_and_an_async_one_refused(default_data_cwd):  # the base's data files exist
    space = {"space": {"actor_rollout_ref.actor.optim.lr": {"grid": [1e-6, 3e-6]}}, "metric": "critic/score/mean",
             "mode": "max", "output": "unused"}
    cfg, _ = check_sweep(parse_sweep({**space, "base": {"overrides": {"trainer.backend": "ray"}}}), log=lambda _: None)
    assert cfg.trainer.backend == "ray"
    spec = parse_sweep({**space, "base": {"overrides": {"trainer.backend": "ray", "rollout.n_gpus_per_node": 1,
                                                        "rollout.nnodes": 1}}})
    with pytest.raises(ConfigErrors, match=r"base: trainer.backend=ray with an asynchronous rollout pool"):
        check_sweep(spec)
