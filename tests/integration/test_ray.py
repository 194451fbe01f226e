"""trainer.backend=ray: two data-parallel worker processes train like one process, land on both
nodes of a two-node cluster, and a worker that raises, dies or hangs stops the run in time."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import pytest
import torch

ray = pytest.importorskip("ray")

from hybridrl.config.loader import load_config  # noqa: E402
from hybridrl.config.schema import RLConfig  # noqa: E402
from hybridrl.plan.resolve import resolve, validate_rl_config  # noqa: E402
from hybridrl.distributed.group import RayRoles, WorkerError, shard_rows, update_rows  # noqa: E402
from hybridrl.distributed.worker import RoleWorker  # noqa: E402
from hybridrl.models.loading import load_tokenizer, resolve_model_path  # noqa: E402
from hybridrl.trainer.build import build_run  # noqa: E402
from hybridrl.trainer.rl import RLTrainer  # noqa: E402
from run_helpers import cut_back  # noqa: E402  (tests/integration/run_helpers.py)

pytestmark = pytest.mark.slow

UNTIMED = ("timing_s/", "timing_per_token_ms/", "perf/")


RAY_CPUS = 2  # the `cluster` fixture's size (tests/conftest.py): two workers of one core each


def overrides(arith_data, run_dir, *extra: str) -> list[str]:
    return [f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}", "data.val_max_samples=8",
            # a constant lr: the resume tests cut a run by giving it fewer steps, which changes a decaying schedule
            # (the default cosine is computed over trainer.total_training_steps), so a cut-and-resumed run could
            # not equal the uninterrupted one whatever the checkpoint holds
            "actor_rollout_ref.actor.optim.warmup_style=constant",
            "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.actor.optim.lr=1e-3",
            "trainer.total_training_steps=3", "trainer.test_freq=3", "trainer.save_freq=0",
            f"trainer.default_local_dir={run_dir}", *extra]


def train(args: list[str]) -> list[dict]:
    cfg = load_config(RLConfig, None, args)
    run = build_run(resolve(cfg), log=lambda *_: None)
    RLTrainer(run, log=lambda *_: None).fit()
    return read_metrics(run.tracker.path)


def read_metrics(path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(UNTIMED)} for line in open(path)]


def assert_trains_like(local: list[dict], other: list[dict]) -> None:
    """Per-step metrics of a distributed run equal the local run's (the tolerances: see below)."""
    assert [r["step"] for r in other] == [r["step"] for r in local] == [0, 1, 2, 3]
    for a, b in zip(local, other):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if key.startswith("training/rollout_probs_diff"):
                # engine vs trainer probabilities: float rounding (~1e-6) that depends on matmul shapes, which
                # differ with the rank split; both runs must show it as noise, not as equal noise
                assert value < 1e-4 and b[key] < 1e-4, (a["step"], key, value, b[key])
                continue
            tolerance = dict(abs=0.02) if key.endswith("clipfrac") else dict(rel=1e-4, abs=1e-6)
            assert math.isfinite(value) and b[key] == pytest.approx(value, **tolerance), (a["step"], key)


def test_shards_cover_every_row_once_and_keep_mini_batches_whole():
    assert [r.tolist() for r in shard_rows(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [r.tolist() for r in shard_rows(1, 2)] == [[0], []]
    # 8 rows, mini-batches of 4 (2 per rank): rank 0 holds rows 0,1 of mini-batch 0 and 4,5 of mini-batch 1
    assert [r.tolist() for r in update_rows(8, 2, 2)] == [[0, 1, 4, 5], [2, 3, 6, 7]]


@pytest.mark.parametrize("algorithm", [
    ["actor_rollout_ref.actor.use_kl_loss=true"],  # policy + reference, 2 mini-batches per step
    ["algorithm.adv_estimator=gae", "critic.optim.lr=1e-3"],  # policy + critic
    # padding-free packing and token-budget micro-batches (80 tokens: about 3 rows each) on every pass;
    # the ray run balances each mini-batch's rows over the ranks by tokens, so its micro-batches differ
    ["algorithm.adv_estimator=gae", "critic.optim.lr=1e-3", "actor_rollout_ref.actor.use_kl_loss=true",
     "actor_rollout_ref.model.use_remove_padding=true", "critic.model.use_remove_padding=true",
     "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=80",
     "critic.ppo_max_token_len_per_gpu=80"],
], ids=["grpo_kl", "ppo_gae", "packed_dynamic"])
def test_two_ray_workers_train_like_one_process(arith_data, tmp_path, cluster, algorithm):
    """Tolerance rel 1e-4: the gradient is summed over ranks in another order than one process sums
    it (float addition is not associative: ~1e-7 relative per step, compounding through Adam over 3
    steps); samples are the same because sampling is counter-based (rollout/keyed.py). Clip
    fractions count tokens past a threshold, where a 1e-7 move can flip a token: they get an
    absolute 0.02. (This test found the critic's clip fraction counting in-range tokens by rounding.)"""
    local = train(overrides(arith_data, tmp_path / "local", *algorithm))
    ray_run = train(overrides(arith_data, tmp_path / "ray", *algorithm, "trainer.backend=ray",
                              "trainer.n_gpus_per_node=2", "trainer.worker_timeout_s=120"))
    assert_trains_like(local, ray_run)
    assert local[1]["actor/grad_norm"] > 0 and local[3]["critic/score/mean"] != local[1]["critic/score/mean"]


@pytest.mark.parametrize("placement", [
    ["trainer.n_gpus_per_node=2"],  # rank r of the teacher beside rank r of the policy
    ["trainer.n_gpus_per_node=1", "distillation.enable_resource_pool=true", "distillation.n_gpus_per_node=1",
     "distillation.nnodes=1"],  # the teacher in a pool of its own (2 CPUs in the test cluster: 1 + 1 workers)
], ids=["actor_pool", "own_pool"])
def test_ray_workers_distil_like_one_process(arith_data, tmp_path, cluster, random_model_dir, placement):
    """The Ray teacher gives the local run's metrics. The teacher is another model (the random one: same
    tokenizer), so the distillation gradient is signal; a teacher equal to the student gives a gradient of float
    noise, which AdamW scales up differently in each summation order."""
    distill = ["distillation.enabled=true", f"distillation.teacher_model.model_path={random_model_dir}",
               "distillation.distillation_loss.loss_mode=k3+", "distillation.distillation_loss.distillation_loss_coef=0.1"]
    local = train(overrides(arith_data, tmp_path / "local", *distill))
    ray_run = train(overrides(arith_data, tmp_path / "ray", *distill, "trainer.backend=ray", *placement,
                              "trainer.worker_timeout_s=120"))
    assert_trains_like(local, ray_run)
    assert local[1]["distill/teacher_kl_mean"] > 1 and local[1]["actor/distill_loss"] > 0


class FaultyWorker(RoleWorker):
    """Rank 1 misbehaves in its policy update, the way `FAULT` says ("slow": 3 s late, then normal)."""

    FAULT = "raise"

    def policy_update(self, batch):
        if self.FAULT == "peer_first":  # the survivor's collective error reaches the driver before the death
            if self.rank == 0:
                raise RuntimeError("[gloo] Connection closed by peer")
            time.sleep(0.5)
            os._exit(3)
        if self.rank == 1 and self.FAULT != "none":
            if self.FAULT == "raise":
                raise ValueError("boom in rank 1")
            if self.FAULT == "user_error":  # an error the user can fix, raised in a worker: its one line
                from hybridrl.errors import HybridRLError

                raise HybridRLError("actor_rollout_ref.x=1 is wrong; set it to 2")
            if self.FAULT == "die":
                os._exit(3)
            if self.FAULT == "slow":
                time.sleep(3)
            else:
                time.sleep(3600)
        return super().policy_update(batch)

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        if self.rank == 1 and self.FAULT == "hang_close":  # an engine that never ends (a stopped vLLM process)
            time.sleep(3600)
        super().close()


def faulty_roles(arith_data, tmp_path, fault: str, timeout_s: float) -> RayRoles:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module is not on the workers' path
    cfg = load_config(RLConfig, None, overrides(arith_data, tmp_path, "trainer.backend=ray", "trainer.n_gpus_per_node=2",
                                                f"trainer.worker_timeout_s={timeout_s}"))
    worker = type(f"Faulty_{fault}", (FaultyWorker,), {"FAULT": fault})
    pad_id = load_tokenizer(resolve_model_path("tiny-arith")).pad_token_id
    return RayRoles(cfg, validate_rl_config(cfg), 3, pad_id, log=lambda *_: None, worker_cls=worker)


@pytest.mark.parametrize("fault, message", [
    ("raise", r"policy\.update raised on rank 1 of 2 \(what it printed: .*/logs/actor-rank1\.log\):(.|\n)*ValueError: "
              r"boom in rank 1"),
    ("die", r"policy\.update: the worker of rank 1 of 2 died"),
    ("user_error", r"^policy\.update on rank 1 of 2: actor_rollout_ref\.x=1 is wrong; set it to 2$"),
    # rank 0 waits in the gradient all-reduce for rank 1: both are stuck, rank 1's stack shows why
    ("hang", r"policy\.update did not finish on rank\(s\) \[0, 1\] of 2 within trainer\.worker_timeout_s=20s(.|\n)*"
             r"stack of rank 0(.|\n)*policy_update(.|\n)*stack of rank 1(.|\n)*time\.sleep\(3600\)"),
])
def test_a_worker_that_raises_dies_or_hangs_stops_the_run_in_time(arith_data, tmp_path, cluster, fault, message):
    roles = faulty_roles(arith_data, tmp_path, fault, timeout_s=20)
    try:
        batch = train_batch(roles, arith_data)
        start = time.monotonic()
        with pytest.raises(WorkerError, match=message):
            roles.policy.update(batch)
        assert time.monotonic() - start < 20 + 3  # the deadline, plus at most STACKS_WAIT_S for the stacks
    finally:
        roles.close()


def train_batch(roles: RayRoles, arith_data):
    """A real batch to update on: 8 prompts x 4 responses generated by the workers."""
    from hybridrl.batch import TrainBatch
    from hybridrl.data.dataset import RLDataset
    from hybridrl.rollout.base import SamplingParams

    tok = load_tokenizer(resolve_model_path("tiny-arith"))
    data = RLDataset([arith_data["train"]], tok, "prompt", 64, "error", False, "data.train_files")
    rollout = roles.policy.generate(data.collate(list(range(8)), tok.pad_token_id), 4, SamplingParams(8))
    return TrainBatch(rollout.sequences(), rollout.response_mask.float(), rollout.rollout_log_probs, None, None)


def test_a_stopped_worker_is_reported_within_seconds_of_the_deadline(arith_data, tmp_path, cluster):
    """Issue #22: a SIGSTOPped worker was reported 13 s after the deadline (its stack was waited for 10 s).
    Then the teardown waited CLOSE_WAIT_S (30 s) more for the stopped worker's close(): it must be killed at once,
    its process gone."""
    import signal

    roles = faulty_roles(arith_data, tmp_path, "none", timeout_s=60)  # starting two workers takes longer
    pid = ray.get(roles.pools["actor"].actors[1].pid.remote())
    try:
        batch = train_batch(roles, arith_data)
        roles.pools["actor"].timeout_s = 5  # rank 0's gloo timeout stays 2 x 60 s: only the driver's deadline fires
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(WorkerError, match=r"policy\.update did not finish on rank\(s\) \[0, 1\] of 2 within trainer\."
                                              r"worker_timeout_s=5s; rank\(s\) \[1\] do not respond at all: the likely "
                                              r"cause(.|\n)*stack of rank 0(.|\n)*stack of rank 1 ---\n\(no answer"):
            roles.policy.update(batch)
        assert time.monotonic() - start < 5 + 2.5
        closing = time.monotonic()
        roles.close()
        assert time.monotonic() - closing < 5
        assert _gone(pid, within_s=5)
    finally:
        if not _gone(pid, within_s=0):
            os.kill(pid, signal.SIGCONT)
        roles.close()


def test_after_a_failure_a_worker_stuck_ending_its_engine_is_not_waited_on(arith_data, tmp_path, cluster):
    """Rank 1 hangs in its update and then in close() (its engine would not end): after the timeout error the
    teardown takes FAILED_CLOSE_WAIT_S, not CLOSE_WAIT_S (30 s); the rank answers its stack, so it is not silent."""
    from hybridrl.distributed.group import FAILED_CLOSE_WAIT_S

    roles = faulty_roles(arith_data, tmp_path, "hang_close", timeout_s=60)
    try:
        batch = train_batch(roles, arith_data)
        roles.pools["actor"].timeout_s = 5
        with pytest.raises(WorkerError, match=r"did not finish on rank\(s\) \[0, 1\] of 2"):
            roles.policy.update(batch)
        assert roles.pools["actor"].silent == set()
        closing = time.monotonic()
        roles.close()
        assert time.monotonic() - closing < FAILED_CLOSE_WAIT_S + 2
    finally:
        roles.close()


def _gone(pid: int, within_s: float) -> bool:
    """Whether the process has ended (or is a zombie) within `within_s` seconds."""
    import psutil

    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


@pytest.mark.parametrize("fault", ["slow", "peer_first"])
def test_a_killed_worker_is_named_not_its_peer(arith_data, tmp_path, cluster, fault):
    """slow: rank 1 is SIGKILLed while rank 0 waits for it in the gradient all-reduce; rank 0 fails at
    once ("Connection closed by peer"), at about the moment Ray reports rank 1's death. peer_first: rank
    0's collective error surely arrives first (rank 1 dies 0.5 s later). The error must name rank 1."""
    import signal
    import threading

    roles = faulty_roles(arith_data, tmp_path, fault, timeout_s=60)
    try:
        batch = train_batch(roles, arith_data)
        pid = ray.get(roles.pools["actor"].actors[1].pid.remote())
        if fault == "slow":
            threading.Timer(1.5, os.kill, (pid, signal.SIGKILL)).start()  # rank 1 sleeps 3 s before its update
        with pytest.raises(WorkerError, match=r"^policy\.update: the worker of rank 1 of 2 died \(.*\)( \(rank\(s\) "
                                              r"\[0\] failed after it\))?; the run stops, resume it from the last "
                                              r"checkpoint \(what it printed: .*/logs/actor-rank1\.log\)$"):
            roles.policy.update(batch)
    finally:
        roles.close()


def test_a_ray_run_saved_and_resumed_equals_the_uninterrupted_one(arith_data, tmp_path, cluster):
    """Checkpoints go through rank 0 (weights, optimizer, sampling counter) and back to every rank."""
    ray_args = ["trainer.backend=ray", "trainer.n_gpus_per_node=2", "trainer.worker_timeout_s=120"]
    save = "trainer.save_freq=2"  # checkpoints at steps 2 and 3
    whole = train(overrides(arith_data, tmp_path / "whole", *ray_args, save))
    assert (tmp_path / "whole" / "global_step_2" / "actor" / "model.safetensors").is_file()
    # the same run cut back to step 2 as a crash would leave it (a copy of its folder: one Ray run fewer)
    cut_back(tmp_path / "whole", tmp_path / "cut", last=3, keep=2)
    resumed = train(overrides(arith_data, tmp_path / "cut", *ray_args, save))  # resume_mode=auto: from global_step_2
    assert (tmp_path / "cut" / "global_step_3").is_dir() and [r["step"] for r in resumed] == [0, 1, 2, 3]
    for a, b in zip(whole, resumed):
        for key, value in a.items():
            assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (a["step"], key)


@pytest.mark.parametrize("extra, message", [
    (["trainer.n_gpus_per_node=3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
      "actor_rollout_ref.actor.ppo_mini_batch_size=3", "data.train_batch_size=3"],
     "3 actor worker(s) = 3 workers need 3 CPUs, the Ray cluster has 2 CPUs"),
    (["trainer.n_gpus_per_node=2", "trainer.device=cuda"],
     "2 actor worker(s) = 2 workers need 2 GPUs, the Ray cluster has 0 GPUs (trainer.device=cuda: one per worker)"),
])
def test_workers_the_cluster_cannot_host_are_refused_at_once(arith_data, tmp_path, cluster, extra, message):
    """Ray would leave such workers pending forever; the run must say why instead."""
    from hybridrl.errors import ConfigError

    cfg = load_config(RLConfig, None, overrides(arith_data, tmp_path, "trainer.backend=ray", *extra))
    start = time.monotonic()
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RayRoles(cfg, validate_rl_config(cfg), 3, 0, log=lambda *_: None)  # with ray the driver needs no GPU
    assert time.monotonic() - start < 10



def test_ray_workers_give_the_local_log_probs_and_entropy(arith_data, tmp_path, cluster):
    """trainer.dump_token_details' entropy: two workers' row shards concatenate to what one process computes."""
    args = overrides(arith_data, tmp_path, "trainer.worker_timeout_s=120")
    cfg = load_config(RLConfig, None, [*args, "trainer.backend=ray", "trainer.n_gpus_per_node=2"])
    pad_id = load_tokenizer(resolve_model_path("tiny-arith")).pad_token_id
    roles = RayRoles(cfg, validate_rl_config(cfg), 3, pad_id, log=lambda *_: None)
    try:
        seqs = train_batch(roles, arith_data).seqs
        lp, entropy = roles.policy.log_probs_and_entropy(seqs)
        alone = roles.policy.log_probs(seqs)
    finally:
        roles.close()
    local_cfg = load_config(RLConfig, None, args)
    local = build_run(resolve(local_cfg), log=lambda *_: None).policy
    local_lp, local_entropy = local.log_probs_and_entropy(seqs)
    mask = seqs.response_mask.bool()
    assert entropy.shape == lp.shape == seqs.response_mask.shape and (entropy[mask] > 0).all()
    assert (entropy[~mask] == 0).all()
    assert torch.equal(lp, alone)  # the extra output leaves the log-probs as they were
    assert torch.allclose(lp, local_lp, atol=1e-5) and torch.allclose(entropy, local_entropy, atol=1e-5)
