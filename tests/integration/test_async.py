"""Asynchronous training (config/schema_async.py, trainer/async_rollout.py): a rollout pool with its own
copy of the weights generates ahead of the trainer. Staleness 0 is the synchronous run metric for metric
and token for token; resume drops the generations in flight and regenerates; a dead rollout worker stops
the run naming it; staleness 1 trains one step off-policy with π_old = the rollout's log-probs."""

from __future__ import annotations

import json
import os
import shutil

import pytest

ray = pytest.importorskip("ray")

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.config.validate import validate_rl_config  # noqa: E402
from hybridrl.distributed.group import WorkerError  # noqa: E402
from hybridrl.trainer import checkpoint  # noqa: E402
from hybridrl.trainer.build import build_run  # noqa: E402
from hybridrl.trainer.rl import RLTrainer  # noqa: E402

pytestmark = pytest.mark.slow
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

UNTIMED = ("timing_s/", "timing_per_token_ms/", "perf/")
# Each run starts its own Ray with one CPU per worker, so every worker computes with one torch thread: the
# synchronous run's single worker would otherwise get two, and sum its gradients in another order.
SYNC_CPUS, ASYNC_CPUS = "ray_kwargs.ray_init.num_cpus=1", "ray_kwargs.ray_init.num_cpus=2"
ASYNC = ["rollout.n_gpus_per_node=1", "rollout.nnodes=1", ASYNC_CPUS]


def overrides(arith_data, run_dir, *extra: str) -> list[str]:
    return [f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}", "data.val_max_samples=8",
            "data.train_batch_size=4", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.actor.optim.lr=1e-3",
            "data.max_response_length=12", "trainer.total_training_steps=4", "trainer.test_freq=4",
            "trainer.save_freq=0", "trainer.logger=[file]", "trainer.backend=ray", "trainer.worker_timeout_s=120",
            f"trainer.default_local_dir={run_dir}", f"trainer.rollout_data_dir={run_dir}/gen", *extra]


def train(args: list[str], lines=None, before_fit=lambda run: None):
    cfg = load_config(RLConfig, None, args)
    run = build_run(cfg, validate_rl_config(cfg), log=lambda *_: None)
    before_fit(run)
    log = lines.append if lines is not None else (lambda *_: None)
    summary = RLTrainer(run, log=log).fit()
    return read_metrics(run.tracker.path), summary


def read_metrics(path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(UNTIMED)} for line in open(path)]


def generations(run_dir) -> dict[int, list[str]]:
    """Each step's sampled responses (rollout_data_dir), in row order."""
    folder = os.path.join(run_dir, "gen")
    return {int(name.split(".")[0]): [json.loads(line)["output"] for line in open(os.path.join(folder, name))]
            for name in sorted(os.listdir(folder))}


def assert_same_run(sync: list[dict], other: list[dict]) -> None:
    """Every metric of the synchronous run, equal (async adds its async/* ones)."""
    assert [r["step"] for r in other] == [r["step"] for r in sync]
    for a, b in zip(sync, other):
        for key, value in a.items():
            if key.startswith("training/rollout_probs_diff"):  # engine vs trainer rounding (~1e-8): noise in both
                assert value < 1e-4 and b[key] < 1e-4, (a["step"], key, value, b[key])
                continue
            assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (a["step"], key, value, b[key])


def test_staleness_0_equals_the_synchronous_run_and_resumes_exactly(arith_data, tmp_path):
    sync, _ = train(overrides(arith_data, tmp_path / "sync", SYNC_CPUS))
    whole, _ = train(overrides(arith_data, tmp_path / "async", *ASYNC))
    assert_same_run(sync, whole)
    assert generations(tmp_path / "async") == generations(tmp_path / "sync")  # the same tokens, step by step
    assert [r["async/staleness_max"] for r in whole[1:]] == [0.0] * 4
    assert [r["async/version"] for r in whole[1:]] == [0.0, 1.0, 2.0, 3.0]  # a push after every step
    # a checkpoint at step 2 taken while step 3's batch was in flight; the resumed run regenerates it
    cut = tmp_path / "cut"
    train(overrides(arith_data, cut, *ASYNC, "trainer.save_freq=2"))
    shutil.rmtree(cut / "global_step_4")
    (cut / checkpoint.LATEST).write_text("2")
    lines = []
    resumed, summary = train(overrides(arith_data, cut, *ASYNC, "trainer.save_freq=2"), lines)
    assert summary.steps == 2 and any("resumed from step 2" in x for x in lines)
    assert_same_run(sync, resumed)
