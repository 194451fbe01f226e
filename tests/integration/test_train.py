"""Real RL runs on the bundled tiny model: parameters move, metrics are finite, errors are one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer
from tests.integration.cli_helpers import run_cli

pytestmark = pytest.mark.slow

REQUIRED_METRICS = [
    "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm", "actor/lr",
    "critic/score/mean", "critic/advantages/mean", "response_length/mean", "timing_s/gen",
    "timing_s/update_actor", "timing_s/step", "perf/throughput", "training/rollout_probs_diff_mean",
    "timing_per_token_ms/gen", "timing_per_token_ms/update_actor", "perf/mfu/actor", "perf/max_memory_allocated_gb",
]


def run_training(overrides: list[str]):
    cfg = load_config(RLConfig, None, overrides)
    run = build_run(resolve(cfg), log=lambda *_: None)
    before = {n: p.detach().clone() for n, p in run.policy.module.named_parameters()}
    summary = RLTrainer(run).fit()
    records = [json.loads(line) for line in open(run.tracker.path)]
    return run, before, summary, records


def base_overrides(arith_data, tmp_path) -> list[str]:
    return [f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}",
            "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32", "actor_rollout_ref.rollout.n=4",
            "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}"]


def test_two_grpo_steps_change_every_parameter_and_log_finite_metrics(arith_data, tmp_path):
    # weight decay 0: a parameter only moves if the loss's gradient reaches it
    run, before, summary, records = run_training(base_overrides(arith_data, tmp_path) + [
        "actor_rollout_ref.actor.optim.weight_decay=0", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.lr=1e-3"])
    unchanged = [n for n, p in run.policy.module.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []
    assert [r["step"] for r in records] == [0, 1, 2]
    for record in records[1:]:
        assert set(REQUIRED_METRICS) <= set(record)
        assert "actor/kl_loss" in record and "timing_s/ref" in record
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in record.values())
    assert "val-core/arithmetic/reward/mean@1" in records[0] and "val-core/arithmetic/reward/mean@1" in records[2]
    assert records[1]["training/rollout_probs_diff_max"] < 1e-4  # token-in/token-out: engine and trainer agree
    assert summary.val_before is not None and summary.val_after is not None


def test_several_mini_batches_and_epochs_recompute_old_log_probs(arith_data, tmp_path):
    _, _, _, records = run_training(base_overrides(arith_data, tmp_path) + [
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_epochs=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "trainer.val_before_train=false",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.shuffle=true"])
    step = records[0]
    assert "timing_s/old_log_prob" in step
    # 4 optimizer steps in a step: after the first, π moves away from π_old
    assert step["actor/ppo_kl"] != 0.0
    assert all(math.isfinite(v) for k, v in step.items() if isinstance(v, float))


def cli(*args: str) -> subprocess.CompletedProcess:
    """In this process (tests/integration/cli_helpers.py): the checks and messages are the command's own."""
    return run_cli(*args)


def cli_process(*args: str) -> subprocess.CompletedProcess:
    """The installed entry point, `python -m hybridrl`, in a process of its own: nothing else reaches its stderr."""
    return subprocess.run([sys.executable, "-m", "hybridrl", *args], capture_output=True, text=True, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_missing_parquet_file_is_one_clear_line(tmp_path):
    proc = cli("train", f"data.train_files={tmp_path}/missing.parquet", f"trainer.default_local_dir={tmp_path}")
    assert_one_line_error(proc, "data.train_files: file not found:", "missing.parquet")


def test_parquet_without_prompt_column_is_one_clear_line(tmp_path):
    path = tmp_path / "noprompt.parquet"
    pq.write_table(pa.Table.from_pylist([{"data_source": "arithmetic", "question": "What is 1+1?",
                                          "reward_model": {"ground_truth": "2"}}]), path)
    proc = cli("train", f"data.train_files={path}", f"trainer.default_local_dir={tmp_path}")
    assert_one_line_error(proc, str(path), "no column 'prompt'", "data.prompt_key")


def test_prompt_over_max_prompt_length_is_one_clear_line(arith_data, tmp_path):
    proc = cli("train", f"data.train_files={arith_data['train']}", "data.max_prompt_length=8",
               f"trainer.default_local_dir={tmp_path}")
    assert_one_line_error(proc, arith_data["train"], "row 0: prompt is", "over data.max_prompt_length=8",
                          "data.truncation=left|right")


def test_config_errors_are_one_line_from_the_cli(tmp_path):
    assert_one_line_error(cli_process("train", "data.train_batch_sise=3"), "did you mean 'data.train_batch_size'")
    assert_one_line_error(cli("train", "actor_rollout_ref.actor.ppo_mini_batch_size=5"),
                          "does not divide data.train_batch_size=32", "1, 2, 4, 8")


def test_help_lists_keys_and_plan_prints_the_batch_plan():
    help_text = cli("train", "--help").stdout
    assert "data.train_batch_size = 32" in help_text and "algorithm.adv_estimator" in help_text
    plan = cli("plan", "data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32")
    assert plan.returncode == 0, plan.stderr
    assert "32 prompts x 8 samples = 256 responses per step" in plan.stdout
    assert "4 mini-batch(es) of 64 responses" in plan.stdout and "2 micro-batch(es) of 32" in plan.stdout
    assert "memory per worker (estimate): peak" in plan.stdout and "policy weights: 13.3 MiB" in plan.stdout
    assert "critic.optim.lr = 1e-05" in help_text  # a section's own default, not the actor's lr


def test_plan_counts_every_role_and_refuses_what_cannot_fit(reward_model_dir):
    # 3.50M parameters: 16 bytes each for a trained model (weights, gradient, 2 AdamW moments), 4 for a frozen one
    plain = cli("plan").stdout
    ppo = cli("plan", "algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "reward_model.enable=true",
              f"reward_model.model.path={reward_model_dir}").stdout
    assert "reference weights" not in plain and "critic weights" not in plain
    assert "reference weights: 13.3 MiB" in ppo and "critic AdamW moments: 26.7 MiB" in ppo
    assert "reward model weights" in ppo
    # the process (~500 MiB), 53 MiB of trained states and 311 MiB of update over 0.75 GiB (no validation set)
    small = ["trainer.memory_per_worker_gb=0.75", "data.val_files=[]"]
    refused = cli("plan", *small, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128")
    assert_one_line_error(refused, "the actor pool needs about", "policy update",
                          "it fits with activation checkpointing + padding-free packing",
                          "or with actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64")
    for fix in (["actor_rollout_ref.model.use_remove_padding=true"],
                ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"]):
        assert cli("plan", *small, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128", *fix).returncode == 0
    derived = cli("plan", *small)  # left null, the size is derived to fit instead
    assert derived.returncode == 0, derived.stderr
    assert "(lowered to fit the memory estimate" in derived.stdout


def test_plan_prints_the_placement_of_every_role():
    assert "placement: backend=local, one process holds policy (actor + hf rollout engine)\n" in cli("plan").stdout
    out = cli("plan", "trainer.backend=ray", "trainer.n_gpus_per_node=2", "trainer.nnodes=2",
              "actor_rollout_ref.actor.use_kl_loss=true", "algorithm.adv_estimator=gae",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64").stdout
    assert "placement: backend=ray, 4 worker processes on cpu" in out
    assert "    worker 3 (node 1): rank 3 of policy (actor + hf rollout engine), reference, critic" in out
    assert "per worker (4): 64 responses per mini-batch" in out
    pools = cli("plan", "trainer.backend=ray", "trainer.n_gpus_per_node=2", "algorithm.adv_estimator=gae",
                "critic.n_workers=1", "actor_rollout_ref.actor.strategy=fsdp2",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64", "data.val_files=[]").stdout
    assert "  actor pool: 2 worker(s), strategy fsdp2\n    worker 0 (node 0): rank 0 of policy" in pools
    assert "  critic pool: 1 worker(s), strategy ddp\n    worker 0 (node chosen by Ray): rank 0 of critic" in pools
    # fsdp2: the sharded policy's transient is counted (its update is its peak without a validation set)
    assert "gathered root group + one layer" in pools


def test_skipping_zero_advantage_rows_trains_the_same_run(arith_data, tmp_path):
    """actor.skip_zero_advantage (on by default) leaves groups with equal rewards out of the update and
    of the old log-prob pass (2 mini-batches per step: off-policy): the run is the one without it."""
    from run_helpers import metrics, overrides, train

    runs = {}
    for skip in (True, False):
        run_dir = tmp_path / f"skip-{skip}"
        train(overrides(arith_data, run_dir, 4, f"actor_rollout_ref.actor.skip_zero_advantage={skip}"))
        runs[skip] = metrics(run_dir)
    assert any(r.get("actor/skipped_frac", 0) > 0 for r in runs[True])  # some groups were really left out
    # the per-token metrics are means over the rows computed; everything else equals the full update's
    differ = ("actor/skipped_frac", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "training/rollout_probs_diff")
    for got, want in zip(runs[True], runs[False], strict=True):
        keys = [k for k in want if not k.startswith(differ)]
        assert set(keys) <= set(got)
        for k in keys:
            assert got[k] == pytest.approx(want[k], rel=1e-4, abs=1e-6), (got["step"], k)
