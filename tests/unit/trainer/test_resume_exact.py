"""Resume = uninterrupted, in the fast tier (issue #47): the end-to-end resume tests (tests/integration/
test_resume.py, tests/unit/check/test_check_resume.py) start subprocesses and 8-step runs and live in the slow
tier, so this one keeps `make test` able to catch a resume that restores the wrong state. A 2-layer, 32-wide
random model, PPO with a critic, an adaptive KL controller, a cosine lr, shuffled data and mini-batches, a reward
that draws from the global random generators, 3 steps to an epoch: a run of 4 steps saved at step 2, and a copy of it cut back to step 2 (as a crash would leave it) and
run again, must log the very same metrics. Step 4 starts the second epoch, so the data order after a resume is
checked across a reshuffle too."""

from __future__ import annotations

import json
import shutil

import pytest

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.data.arithmetic import write_dataset
from hybridrl.plan.resolve import resolve
from hybridrl.trainer import checkpoint
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

UNTIMED = ("timing_s/", "timing_per_token_ms/", "perf/")  # wall clock and memory differ between runs


# A reward that draws from Python's, NumPy's and torch's global generators (a user's tie-break or noise), scored in
# the trainer's process: a resume must restore those generators too, or its scores differ from the run's.
NOISY_REWARD = """
import random

import numpy as np
import torch

from hybridrl.rewards.scorers import SCORERS


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    noise = random.random() + float(np.random.rand()) + float(torch.rand(1))
    return SCORERS.get(data_source)(data_source, solution_str, ground_truth, extra_info) + 0.01 * noise
"""


def args(data: dict, model: str, run_dir) -> list[str]:
    return [f"data.train_files={data['train']}", f"data.val_files={data['val']}", f"trainer.default_local_dir={run_dir}",
            f"custom_reward_function.path={data['reward']}", "reward_model.num_workers=0",
            f"actor_rollout_ref.model.path={model}", f"critic.model.path={model}",
            "data.train_batch_size=4", "actor_rollout_ref.rollout.n=2", "data.max_response_length=6",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "critic.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.actor.optim.lr=1e-3",
            "actor_rollout_ref.actor.optim.warmup_style=cosine", "critic.optim.lr=1e-3",
            "algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
            "algorithm.kl_ctrl.kl_coef=0.05", "actor_rollout_ref.actor.shuffle=true", "critic.shuffle=true",
            "data.shuffle=true", "trainer.total_training_steps=4", "trainer.save_freq=2", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.logger=[file]"]


def fit(argv: list[str], log=lambda *_: None):
    cfg = load_config(RLConfig, None, argv)
    return RLTrainer(build_run(resolve(cfg), log=log), log=log).fit()


def metrics(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    return [{k: v for k, v in r.items() if not k.startswith(UNTIMED)} for r in rows]


@pytest.fixture(scope="module")
def twelve_prompts(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("twelve")
    (folder / "noisy_reward.py").write_text(NOISY_REWARD)
    return {**write_dataset(str(folder), train_size=12, val_size=4, seed=3), "reward": str(folder / "noisy_reward.py")}


def test_a_run_cut_at_step_2_and_resumed_logs_the_uninterrupted_runs_metrics(twelve_prompts, random_model_dir, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    fit(args(twelve_prompts, random_model_dir, whole))
    shutil.copytree(whole, cut)  # the same run, then everything after step 2 lost
    shutil.rmtree(cut / "global_step_4")
    (cut / checkpoint.LATEST).write_text("2")
    lines: list[str] = []
    summary = fit(args(twelve_prompts, random_model_dir, cut), log=lines.append)
    assert summary.steps == 2 and any("resumed from step 2" in x for x in lines), lines
    expected = metrics(whole)
    assert [r["step"] for r in expected] == [1, 2, 3, 4]
    got = metrics(cut)
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    for a, b in zip(expected, got):
        assert a == b, (a["step"], {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)})
    # the state a resume must carry moved during the run, so a restore that dropped it would show
    lrs = [r["actor/lr"] for r in expected]
    assert lrs[0] > lrs[1] > lrs[2] > lrs[3], lrs  # the cosine's position
    assert len({r["actor/reward_kl_penalty_coeff"] for r in expected}) > 1  # the adaptive KL coefficient
    assert expected[1]["critic/grad_norm"] > 0
