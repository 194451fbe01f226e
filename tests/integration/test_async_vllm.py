"""Asynchronous training with rollout.name=vllm (issue #24): the rollout pool's worker drives its own vLLM engine,
loaded with the trainer's pushed weights. Staleness 1 trains one step off and changes the weights; staleness 0
samples from exactly the trainer's weights (fp32: the engine/trainer gap is rounding); the engines' threads sit on
distinct cores (the rollout pool's after the trainer pool's) and their processes and /dev/shm folders end with the
run. Skipped where vLLM or Ray is not installed."""

from __future__ import annotations

import math
import os
import sys

import pytest
import torch

ray = pytest.importorskip("ray")
pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

from hybridrl.models.loading import resolve_model_path  # noqa: E402
from test_async import ASYNC, overrides, train  # noqa: E402
from test_vllm_ray import engine_processes, names, settled_cores, wait_gone  # noqa: E402

pytestmark = pytest.mark.slow
VLLM = [*ASYNC, "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25",
        "actor_rollout_ref.rollout.dtype=float32", "trainer.worker_timeout_s=300"]  # fp32: log-probs the trainer's


def _engine_of(worker) -> tuple[int, str]:
    """Runs in a worker: its pid and its vLLM engine's scratch folder (trainer pool: the policy's engine)."""
    engine = worker.engine if hasattr(worker, "engine") else worker.policy.engine
    return os.getpid(), engine._dir


class Engines:
    """before_fit hook: each pool's engine processes, threads' cores and scratch folder while the run is up."""

    def __call__(self, run) -> None:
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module is not on the workers' path
        actors = {"trainer": run.policy.pool.actors[0], "rollout": run.source.rollouts.pool.pool.actors[0]}
        self.found = {name: ray.get(a.__ray_call__.remote(_engine_of)) for name, a in actors.items()}
        self.processes = {name: engine_processes(pid) for name, (pid, _) in self.found.items()}
        self.cores = {name: settled_cores(pid) for name, (pid, _) in self.found.items()}
        self.names = {name: names(pid) for name, (pid, _) in self.found.items()}  # for a failure message

    def assert_gone(self) -> None:
        for name, processes in self.processes.items():
            assert processes, f"no vLLM process under the {name} worker"
            assert not wait_gone(processes, 30), f"the {name} pool's vLLM engine outlived the run"
            assert not os.path.exists(self.found[name][1]), f"the {name} engine's /dev/shm folder is left"


def finite(record: dict) -> bool:
    return all(math.isfinite(v) for v in record.values() if isinstance(v, (int, float)))


def test_one_step_off_with_a_vllm_rollout_worker_trains_and_leaves_nothing(arith_data, tmp_path):
    from safetensors.torch import load_file

    engines = Engines()
    records, _ = train(overrides(arith_data, tmp_path, *VLLM, "async_training.staleness_threshold=1",
                                 "trainer.save_freq=-1", "trainer.val_before_train=false"), before_fit=engines)
    steps = [r for r in records if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2, 3, 4] and all(finite(r) for r in steps)
    assert [r["async/staleness_max"] for r in steps] == [0.0, 1.0, 1.0, 1.0]
    # step 1 is on-policy: the engine started from the trainer's weights (pushed at the start)
    assert steps[0]["training/rollout_probs_diff_max"] < 1e-4, steps[0]["training/rollout_probs_diff_max"]
    assert steps[-1]["response_length/mean"] > 0
    before = load_file(os.path.join(resolve_model_path("tiny-arith"), "model.safetensors"))
    after = load_file(os.path.join(tmp_path, "global_step_4", "actor", "model.safetensors"))
    assert any(not torch.equal(v, after[k].to(v.dtype)) for k, v in before.items())
    if len(os.sched_getaffinity(0)) >= 2:  # the rollout engine binds to the share after the trainer worker's
        assert engines.cores["rollout"] and not engines.cores["rollout"] & engines.cores["trainer"], (
            engines.cores, engines.names)
    engines.assert_gone()


def test_staleness_0_samples_from_exactly_the_trainers_weights_every_step(arith_data, tmp_path):
    engines = Engines()
    records, _ = train(overrides(arith_data, tmp_path, *VLLM, "trainer.total_training_steps=3",
                                 "trainer.test_freq=-1", "trainer.val_before_train=false"), before_fit=engines)
    steps = [r for r in records if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2, 3] and all(finite(r) for r in steps)
    assert [r["async/staleness_max"] for r in steps] == [0.0] * 3
    # a rollout engine that kept older weights than the pushed ones would sample from another policy: ~1e-2 or more
    assert all(r["training/rollout_probs_diff_max"] < 1e-4 for r in steps), [
        r["training/rollout_probs_diff_max"] for r in steps]
    engines.assert_gone()
