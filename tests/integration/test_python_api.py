"""hybridrl as a library: examples/python_api.py really trains (every weight moves, metrics finite, its
callback's metric logged), and a trainer.backend=ray run scores with an in-memory reward function."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading

import pytest
import torch
from safetensors.torch import load_file

from hybridrl.models.loading import BUNDLED

pytestmark = pytest.mark.slow
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAY_CPUS = 1  # the `cluster` fixture's size (tests/conftest.py): one worker


def test_the_example_trains_evaluates_and_loads(tmp_path):
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=REPO)  # this checkout's hybridrl, whatever is installed
    done = subprocess.run([sys.executable, os.path.join(REPO, "examples", "python_api.py"), str(run_dir)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(isinstance(v, (int, float)) and math.isfinite(v) for r in rows for v in r.values())
    # the callback's metric, in the validation steps' lines beside the validation it was computed from
    assert [r.get("val-core/best_accuracy") for r in rows] == [
        rows[0]["val-core/custom/reward/mean@1"], None,
        max(rows[0]["val-core/custom/reward/mean@1"], rows[2]["val-core/custom/reward/mean@1"])]
    assert rows[1]["actor/grad_norm"] > 0
    before = load_file(str(BUNDLED["tiny-arith"] / "model.safetensors"))
    after = load_file(str(run_dir / "global_step_2" / "actor" / "model.safetensors"))
    assert [k for k in before if torch.equal(before[k], after[k])] == []  # every trained tensor moved
    assert sorted(os.listdir(run_dir / "data"))[0].startswith("train-")  # the rows the run (and a resume) read
    assert "eval: {'val-core/custom/reward/mean@4'" in done.stdout and "12+30 -> " in done.stdout


def test_a_ray_run_scores_with_an_in_memory_function_on_the_driver(tmp_path, cluster, arith_data):
    """With trainer.backend=ray the workers generate and update; the driver scores (in its forked scoring
    processes, reward_model.num_workers=2). So a reward function that could not be pickled (it holds a lock)
    works: nothing ships it to the Ray workers."""
    import hybridrl

    lock = threading.Lock()

    def reward(prompts, completions, **columns):  # conversational data: completions are messages
        with lock:
            return [float(c[0]["content"].strip() == t) for c, t in zip(completions, columns["ground_truth"])]

    run = hybridrl.train({"data.train_batch_size": 4, "actor_rollout_ref.rollout.n": 2,
                          "actor_rollout_ref.actor.ppo_mini_batch_size": 4, "trainer.total_training_steps": 1,
                          "data.val_max_samples": 4,
                          "trainer.save_freq": 0, "trainer.backend": "ray", "trainer.n_gpus_per_node": 1,
                          "trainer.worker_timeout_s": 120, "trainer.logger": ["file"],
                          "trainer.default_local_dir": str(tmp_path)},
                         data=arith_data["train"], val_data=arith_data["val"], reward=reward, log=lambda line: None)
    (step,) = [r for r in run.metrics() if r["step"] == 1]
    assert step["reward/errors"] == 0 and 0 <= step["critic/score/mean"] <= 1
    assert "val-core/arithmetic/reward/mean@1" in step  # the validation prompts, scored by the same function
    assert run.summary.steps == 1 and run.checkpoints() == []
