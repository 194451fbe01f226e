"""LoRA with trainer.backend=ray (ddp): two workers, each summing only the adapters' gradients, train
like one process; the reference in each worker is its policy module with the adapter off. The same for
a LoRA critic (adapters and value head), whose rank 0 writes the adapter folder."""

from __future__ import annotations

import json
import math
import os

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("peft")

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.plan.resolve import resolve  # noqa: E402
from hybridrl.trainer.build import build_run  # noqa: E402
from hybridrl.trainer.rl import RLTrainer  # noqa: E402

pytestmark = pytest.mark.slow
UNTIMED = ("timing_s/", "timing_per_token_ms/", "perf/")


def train(args: list[str]) -> list[dict]:
    cfg = load_config(RLConfig, None, args)
    run = build_run(resolve(cfg), log=lambda *_: None)
    RLTrainer(run, log=lambda *_: None).fit()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(UNTIMED)} for line in open(run.tracker.path)]


def local_and_two_ray_workers(arith_data, tmp_path, *extra: str) -> tuple[list[dict], list[dict]]:
    """The metrics of a 2-step run in this process and over two ray workers (ddp), with `extra` overrides."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        args = lambda d, *more: [  # noqa: E731
            f"data.train_files={arith_data['train']}", "data.val_files=[]", "data.train_batch_size=8",
            "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "trainer.total_training_steps=2",
            "trainer.val_before_train=false", "trainer.test_freq=-1", f"trainer.default_local_dir={tmp_path / d}",
            *extra, *more]
        local = train(args("local"))
        remote = train(args("ray", "trainer.backend=ray", "trainer.n_gpus_per_node=2"))
    finally:
        ray.shutdown()
    assert [r["step"] for r in remote] == [r["step"] for r in local] == [1, 2]
    for a, b in zip(local, remote):
        for key, value in a.items():
            if key.startswith("training/rollout_probs_diff"):
                assert value < 1e-4 and b[key] < 1e-4
                continue
            tolerance = dict(abs=0.02) if key.endswith("clipfrac") else dict(rel=1e-4, abs=1e-6)
            assert math.isfinite(value) and b[key] == pytest.approx(value, **tolerance), (a["step"], key)
    return local, remote


def test_two_ray_workers_train_a_lora_policy_and_critic_like_one_process(arith_data, tmp_path):
    # one pair of runs covers both roles (each ray start costs ~20 s): PPO with a KL loss, LoRA on both
    local, _ = local_and_two_ray_workers(arith_data, tmp_path, "actor_rollout_ref.actor.optim.lr=3e-3",
                                         "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.actor.use_kl_loss=true",
                                         "algorithm.adv_estimator=gae", "critic.optim.lr=1e-3",
                                         "critic.model.lora_rank=8", "trainer.save_freq=2")
    assert local[-1]["actor/kl_loss"] > 0  # the adapter moved the policy away from the reference
    for role in ("actor", "critic"):  # written by the workers' rank 0
        folder = tmp_path / "ray" / "global_step_2" / role
        assert (folder / "adapter_model.safetensors").is_file() and not (folder / "model.safetensors").exists()
