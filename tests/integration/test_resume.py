"""Checkpoints and resume on real runs: SIGKILL at a random moment then resume equals the
uninterrupted run, partial checkpoints are passed over, saved folders load with plain
transformers, and unusable output folders fail before training."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from hybridrl.errors import ConfigError
from hybridrl.trainer import checkpoint
from hybridrl.trainer.manifest import MANIFEST

from run_helpers import cut_back, metrics, overrides, train  # tests/integration/run_helpers.py

pytestmark = pytest.mark.slow


def cli_cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "hybridrl", "train", *args]


def test_sigkill_at_a_random_moment_then_resume_equals_the_uninterrupted_run(arith_data, tmp_path):
    steps = 12
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same thread count in every process: same float sums
    args = lambda d: overrides(arith_data, d, steps, "trainer.save_freq=3")  # noqa: E731
    subprocess.run(cli_cmd(args(straight)), check=True, capture_output=True, env=env, timeout=600)

    seed = random.randrange(10**6)
    delay = random.Random(seed).uniform(0.0, 1.5)
    proc = subprocess.Popen(cli_cmd(args(killed)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 300
    while not (killed / checkpoint.LATEST).exists():
        assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.02)
    time.sleep(delay)  # anywhere after the first checkpoint: mid-step, mid-save, mid-validation
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run(cli_cmd(args(killed)), capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    out = resumed.stdout + resumed.stderr
    assert "resumed from step" in out or "already finished" in out, f"seed {seed}: {out[-2000:]}"
    expected, got = metrics(straight), metrics(killed)
    assert [r["step"] for r in got] == list(range(steps + 1)), f"seed {seed}"
    assert got == expected, f"seed {seed}, killed after {delay:.2f}s"


def test_resume_is_exact_for_ppo_with_critic_and_adaptive_kl(arith_data, tmp_path):
    ppo = ["algorithm.adv_estimator=gae", "critic.optim.lr=1e-4", "algorithm.use_kl_in_reward=true",
           "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.kl_coef=0.05", "trainer.save_freq=2",
           "actor_rollout_ref.actor.shuffle=true", "critic.shuffle=true"]
    train(overrides(arith_data, tmp_path / "a", 4, *ppo))
    cut_back(tmp_path / "a", tmp_path / "b", last=4, keep=2)  # b: the same run, then everything after step 2 lost
    lines = []
    run, summary = train(overrides(arith_data, tmp_path / "b", 4, *ppo), log=lines.append)
    assert summary.steps == 2 and any("resumed from step 2 (epoch 0, sample 16)" in x for x in lines)
    assert metrics(tmp_path / "b") == metrics(tmp_path / "a")
    assert metrics(tmp_path / "a")[-1]["actor/reward_kl_penalty_coeff"] != 0.05  # the controller moved, and resumed


def test_partial_and_interrupted_checkpoints_are_never_resumed(arith_data, tmp_path, monkeypatch):
    from transformers.utils import logging as hf_logging

    args = overrides(arith_data, tmp_path, 4, "trainer.save_freq=2")
    hf_logging.enable_progress_bar()
    train(args)
    assert hf_logging.is_progress_bar_enabled()  # saving turned transformers' bars off for its own writes only
    good = tmp_path / "global_step_4"
    # a copy whose save never finished (no manifest) and one whose weights file was cut short
    shutil.copytree(good, tmp_path / "global_step_6")
    os.remove(tmp_path / "global_step_6" / MANIFEST)
    shutil.copytree(good, tmp_path / "global_step_8")
    with open(tmp_path / "global_step_8" / "actor" / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    (tmp_path / checkpoint.LATEST).write_text("8")

    # and a save killed mid-write: the crash leaves only a temporary folder behind
    def crash(_):
        raise KeyboardInterrupt("killed while saving")

    monkeypatch.setattr(checkpoint, "_fsync_tree", crash)
    with pytest.raises(KeyboardInterrupt):
        train(overrides(arith_data, tmp_path, 10, "trainer.save_freq=2"))
    monkeypatch.undo()
    assert any(p.name.startswith(".tmp_global_step_") for p in tmp_path.iterdir())

    lines = []
    run, summary = train(overrides(arith_data, tmp_path, 6, "trainer.save_freq=2"), log=lines.append)
    assert any("skipping" in x and "global_step_6: no checkpoint.json" in x for x in lines)
    assert any("skipping" in x and "global_step_8: actor/model.safetensors has 1000 bytes" in x for x in lines)
    assert any("resumed from step 4" in x for x in lines) and summary.steps == 2
    assert checkpoint.problem_of(str(tmp_path / "global_step_6")) is None  # rewritten whole by this run
    assert not any(p.name.startswith(".tmp_global_step_") for p in tmp_path.iterdir())  # the crash's leftovers removed


def test_saved_actor_loads_with_plain_transformers_and_export_matches(arith_data, tmp_path):
    from transformers import AutoModelForCausalLM

    run, _ = train(overrides(arith_data, tmp_path, 2))  # save_freq=-1: the last step only
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_2"]
    actor = tmp_path / "global_step_2" / "actor"
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"):
        assert (actor / name).is_file()
    loaded = AutoModelForCausalLM.from_pretrained(actor).eval()
    ids = torch.tensor([[1, 5, 9, 40, 41, 7, 300]])
    run.policy.module.eval()
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, run.policy.module(input_ids=ids).logits)
    out = subprocess.run([sys.executable, "-m", "hybridrl", "export", str(tmp_path), str(tmp_path / "hf")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "logits match (max |difference| = 0)" in out.stdout
    assert torch.equal(AutoModelForCausalLM.from_pretrained(tmp_path / "hf")(input_ids=ids).logits,
                       loaded(input_ids=ids).logits)


def test_finished_run_exits_0_and_config_changes_are_refused(arith_data, tmp_path):
    args = overrides(arith_data, tmp_path, 2)
    train(args)
    done = subprocess.run(cli_cmd(args), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "the run already finished (step 2 of 2); nothing to train" in done.stdout + done.stderr
    changed = subprocess.run(cli_cmd(args + ["data.train_batch_size=4", "algorithm.adv_estimator=rloo"]),
                             capture_output=True, text=True, timeout=300)
    assert changed.returncode == 2 and "Traceback" not in changed.stderr
    assert ("was written with a different config: algorithm.adv_estimator: 'grpo' -> 'rloo'; data.train_batch_size: "
            "8 -> 4. Resume with the same values, set trainer.resume_allow_config_change=true") in changed.stderr
    # more steps is a safe change: the run continues from its checkpoint
    run, summary = train(args[:-2] + ["trainer.total_training_steps=3", *args[-1:]])
    assert summary.steps == 1 and summary.last_step == 3
    # resume_path picks a given checkpoint; disable starts over
    run, summary = train(args + ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={tmp_path / 'global_step_2'}",
                                 "trainer.total_training_steps=3"])
    assert summary.steps == 1
    run, summary = train(args + ["trainer.resume_mode=disable"])
    assert summary.steps == 2


def test_checkpoints_are_pruned_to_the_newest(arith_data, tmp_path):
    train(overrides(arith_data, tmp_path, 6, "trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=2",
                    "algorithm.adv_estimator=gae", "trainer.max_critic_ckpt_to_keep=1"))
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_5", "global_step_6"]
    assert (tmp_path / "global_step_6" / "critic" / "model.safetensors").is_file()
    assert not (tmp_path / "global_step_5" / "critic").exists()
    assert checkpoint.problem_of(str(tmp_path / "global_step_5")) is None  # still whole, and exportable


def test_unwritable_or_full_output_folder_fails_before_training(arith_data, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    # every run folder is checked first (hybridrl/paths.py), so a file in the way is named as such
    with pytest.raises(ConfigError, match=r"trainer\.default_local_dir=.*a_file/run': .*a_file is a file, not a folder; "
                                          r"give a path you can write to"):
        train(overrides(arith_data, blocker / "run", 2))
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9 - 10**6, 10**6))
    with pytest.raises(ConfigError, match=r"has 0\.00 GiB free, but one checkpoint needs ~0\.04 GiB; free space"):
        train(overrides(arith_data, tmp_path / "run", 2))
    train(overrides(arith_data, tmp_path / "run", 2, "trainer.save_freq=0"))  # not saving: no space needed
    assert not list((tmp_path / "run").glob("global_step_*"))


def test_resume_is_exact_under_the_default_cosine_schedule(arith_data, tmp_path):
    """The actor's default lr decays by a cosine over trainer.total_training_steps (run_helpers pins a constant lr
    for the tests that cut a run by shortening it): a crash after step 2 of 4 and a resume log exactly the
    uninterrupted run's metrics, actor/lr at every step included, so the schedule's position is restored."""
    from run_helpers import resume_equals_uninterrupted

    cosine = "actor_rollout_ref.actor.optim.warmup_style=cosine"
    resume_equals_uninterrupted(lambda d: overrides(arith_data, d, 4, cosine, "trainer.save_freq=2"), tmp_path)
    lrs = [r["actor/lr"] for r in metrics(tmp_path / "a") if "actor/lr" in r]
    assert len(lrs) == 4 and lrs[0] > lrs[1] > lrs[2] > lrs[3], lrs  # it decayed: the test ran the cosine
