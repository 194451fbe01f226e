"""Asynchronous training (config/schema_async.py, trainer/async_rollout.py): a rollout pool with its own
copy of the weights generates ahead of the trainer. Staleness 0 is the synchronous run metric for metric
and token for token; resume drops the generations in flight and regenerates; a dead rollout worker stops
the run naming it; staleness 1 trains one step off-policy with π_old = the rollout's log-probs."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

ray = pytest.importorskip("ray")

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.plan.resolve import resolve  # noqa: E402
from hybridrl.distributed.group import WorkerError  # noqa: E402
from hybridrl.trainer import checkpoint  # noqa: E402
from hybridrl.trainer.build import build_run  # noqa: E402
from hybridrl.trainer.rl import RLTrainer  # noqa: E402
from run_helpers import cut_back  # noqa: E402

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
            # a constant lr, as these equalities were calibrated: under the default cosine decay the last step's
            # lr is near 0, actor/ppo_kl shrinks to ~1e-3 and the engine/trainer rounding in it (~5e-8, the same
            # absolute size as at a constant lr) is past rel 1e-6 (measured 2026-11-28; every other metric equal)
            "actor_rollout_ref.actor.optim.warmup_style=constant",
            "data.max_response_length=12", "trainer.total_training_steps=4", "trainer.test_freq=4",
            "trainer.save_freq=0", "trainer.logger=[file]", "trainer.backend=ray", "trainer.worker_timeout_s=120",
            f"trainer.default_local_dir={run_dir}", f"trainer.rollout_data_dir={run_dir}/gen", *extra]


def train(args: list[str], lines=None, before_fit=lambda run: None):
    cfg = load_config(RLConfig, None, args)
    run = build_run(resolve(cfg), log=lambda *_: None)
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
    whole, _ = train(overrides(arith_data, tmp_path / "async", *ASYNC, "trainer.save_freq=2"))
    assert_same_run(sync, whole)
    assert generations(tmp_path / "async") == generations(tmp_path / "sync")  # the same tokens, step by step
    assert [r["async/staleness_max"] for r in whole[1:]] == [0.0] * 4
    assert [r["async/version"] for r in whole[1:]] == [0.0, 1.0, 2.0, 3.0]  # a push after every step
    # a checkpoint at step 2 taken while step 3's batch was in flight; the resumed run regenerates it. The cut run
    # is a copy of the whole one (the same files, one Ray run fewer) that lost everything after step 2
    cut = tmp_path / "cut"
    cut_back(tmp_path / "async", cut, last=4, keep=2)
    lines = []
    resumed, summary = train(overrides(arith_data, cut, *ASYNC, "trainer.save_freq=2"), lines)
    assert summary.steps == 2 and any("resumed from step 2" in x for x in lines)
    assert_same_run(sync, resumed)


ONE_STEP_OFF = [*ASYNC, "async_training.staleness_threshold=1"]


def test_one_step_off_trains_on_the_rollout_log_probs_and_resumes_from_the_checkpoint_weights(arith_data, tmp_path):
    """staleness 1, trigger 1: batch k comes from the weights of step k-2 (lag 1 from step 2 on), and π_old is the
    rollout's own log-probs, so the engine/π_old gap is exactly 0 on those steps. A resume at step 2 drops the
    batch in flight and regenerates it from the checkpoint's weights: its first step has lag 0."""
    run = tmp_path / "run"
    whole, _ = train(overrides(arith_data, run, *ONE_STEP_OFF, "trainer.save_freq=2"))
    steps = whole[1:]
    assert [r["async/staleness_max"] for r in steps] == [0.0, 1.0, 1.0, 1.0]
    assert [r["training/rollout_probs_diff_max"] == 0.0 for r in steps] == [False, True, True, True]
    assert all(0 < r["async/wait_s"] for r in steps) and steps[-1]["async/in_flight"] == 0.0
    shutil.rmtree(run / "global_step_4")
    (run / checkpoint.LATEST).write_text("2")
    lines = []
    resumed, summary = train(overrides(arith_data, run, *ONE_STEP_OFF, "trainer.save_freq=2"), lines)
    assert summary.steps == 2 and summary.last_step == 4 and any("resumed from step 2" in x for x in lines)
    assert [r["async/staleness_max"] for r in resumed[-2:]] == [0.0, 1.0]
    assert resumed[-2]["async/version"] == 2.0  # the checkpoint's weights, pushed at the resume


def test_decoupled_ppo_recomputes_pi_old_and_corrects_the_rollout_gap(arith_data, tmp_path):
    """compute_prox_log_prob: π_old is recomputed on the trainer for lagged batches, so the engine/π_old gap is the
    one-step weight change (far above float noise), and rollout_is weights the loss by π_old/π_rollout."""
    rows, _ = train(overrides(arith_data, tmp_path, *ONE_STEP_OFF, "trainer.total_training_steps=3",
                              "async_training.compute_prox_log_prob=true", "async_training.use_rollout_log_probs=false",
                              "algorithm.rollout_correction.rollout_is=token"))
    steps = rows[1:]
    assert [r["async/staleness_max"] for r in steps] == [0.0, 1.0, 1.0]
    assert steps[0]["training/rollout_probs_diff_max"] < 1e-5 < steps[1]["training/rollout_probs_diff_max"]
    assert all(r["rollout_corr/is_weight_mean"] > 0 for r in steps)


@pytest.mark.parametrize("fault", ["die", "hang"])
def test_a_dead_or_hung_rollout_worker_stops_the_run_naming_it(arith_data, tmp_path, fault):
    """The rollout worker is SIGKILLed (or SIGSTOPped) right after step 1's weight push, with step 2's batch in
    flight: the run stops at step 2 naming the rollout pool's rank, within trainer.worker_timeout_s."""
    import signal
    import time

    pids, when = [], []

    def sabotage(run):
        pool = run.workers.pools["rollout"]
        pool.timeout_s = 5  # the driver's deadline only (set after the workers' start, which may take longer)
        pids.append(ray.get(pool.actors[0].pid.remote()))
        push = run.source.rollouts.after_update

        def push_then_fail(step):
            push(step)
            if step == 1:
                when.append(time.monotonic())
                os.kill(pids[0], signal.SIGKILL if fault == "die" else signal.SIGSTOP)
        run.source.rollouts.after_update = push_then_fail
        take = run.source.rollouts.take

        def timed_take(*args):
            try:
                return take(*args)
            except WorkerError:
                when.append(time.monotonic())  # when the driver stopped (shutting the workers down comes after)
                raise
        run.source.rollouts.take = timed_take

    call = r"^rollout\.(generate|load_weights)"
    message = (call + r": the worker of rank 0 of 1 of the rollout pool died" if fault == "die"
               else call + r" did not finish on rank\(s\) \[0\] of 1 of the rollout pool within "
               r"trainer\.worker_timeout_s=5s(.|\n)*stack of rank 0")
    try:
        with pytest.raises(WorkerError, match=message):
            train(overrides(arith_data, tmp_path, *ASYNC, "trainer.val_before_train=false"), before_fit=sabotage)
        assert when[1] - when[0] < 5 + 3  # the deadline, plus at most STACKS_WAIT_S for the stacks
        assert not (tmp_path / "global_step_2").exists()
    finally:
        if fault == "hang" and pids:
            try:
                os.kill(pids[0], signal.SIGCONT)
            except ProcessLookupError:
                pass


PARTIAL = [*ONE_STEP_OFF, "async_training.partial_rollout=true", "data.max_response_length=48",
           # one row at a time: generating a batch outlasts a training step, so pushes land mid-way
           "actor_rollout_ref.rollout.max_num_seqs=1",
           "actor_rollout_ref.rollout.ignore_eos=true"]


def test_partial_rollouts_train_with_per_token_versions_and_resume(arith_data, tmp_path):
    """staleness 1 with partial rollouts: a push may land mid-generation (timing decides where), so the per-token
    staleness and the interrupted share are logged and bounded by the one-step-off schedule; the run trains
    (steps 3-4 change the weights) and resumes from step 2 as async runs do (the checkpoint's weights, lag 0)."""
    from safetensors.torch import load_file

    run = tmp_path / "run"
    whole, _ = train(overrides(arith_data, run, *PARTIAL, "trainer.save_freq=2"))
    steps = whole[1:]
    for r in steps:
        assert 0.0 <= r["async/interrupted_frac"] <= 1.0 and 0.0 <= r["async/staleness_token_mean"] <= 1.0
        assert all(isinstance(v, str) or v == v and abs(v) != float("inf") for v in r.values())  # finite
    assert steps[0]["async/staleness_max"] == 0.0 and steps[0]["async/interrupted_frac"] == 0.0
    assert all(r["async/staleness_token_mean"] <= r["async/staleness_max"] for r in steps)
    # some push landed while its batch was generating (a batch's rows run one after another: generating 16 x 48
    # tokens outlasts a training step), so that batch's later tokens are fresher than one step off
    fresher = [r["async/staleness_token_mean"] for r in steps[1:]]
    assert any(x < 1.0 for x in fresher), fresher
    before, after = (load_file(f"{run}/global_step_{s}/actor/model.safetensors") for s in (2, 4))
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    shutil.rmtree(run / "global_step_4")
    (run / checkpoint.LATEST).write_text("2")
    lines = []
    resumed, summary = train(overrides(arith_data, run, *PARTIAL, "trainer.save_freq=2"), lines)
    assert summary.steps == 2 and summary.last_step == 4 and any("resumed from step 2" in x for x in lines)
    assert resumed[-2]["async/staleness_max"] == 0.0 and resumed[-2]["async/version"] == 2.0
    print("partial:", [(r["async/interrupted_frac"], r["async/staleness_token_mean"]) for r in steps + resumed[-2:]])
