"""The CUDA paths, run by `make gpu-check` on a machine with a GPU (skipped elsewhere, tests/conftest.py):
bf16 autocast on CUDA against the CPU path, bf16 generation, NCCL between two GPUs, FSDP2's CPU offload
policy, the optimizer's host offload and the reference's, and a short training run with all of them.

What each must show: the same numbers as the path already tested on the CPU (within the stated
tolerance: fp32 CUDA vs CPU kernels 1e-4, bf16 as in tests/unit/workers/test_mixed_precision.py),
and the state where the config put it (host or GPU) between phases.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
import torch.multiprocessing as mp

from hybridrl.batch import select
from hybridrl.parallel.dp import SINGLE, init_data_parallel
from hybridrl.parallel.sharding import FullyShard, Replicated, make_sharding
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.models.memory import offload_optimizer_state, on_device
from hybridrl.models.precision import Precision
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.policy import Policy
from hybridrl.workers.reference import Reference

TESTS = __file__.rsplit("/tests/", 1)[0] + "/tests"
sys.path.insert(0, f"{TESTS}/unit/workers")
sys.path.insert(0, f"{TESTS}/unit/parallel")
sys.path.insert(0, f"{TESTS}/unit/rollout")
from ranks import spawn_two_ranks  # noqa: E402
from test_decode import _prompts  # noqa: E402
from test_policy import batch, settings  # noqa: E402

pytestmark = pytest.mark.cuda
SHARDS = [torch.arange(0, 4), torch.arange(4, 8)]


def _policy(model_dir: str, device: str, precision: Precision, lr: float = 0.0, sharding=None, mini: int = 8,
            optimizer_offload: bool = False) -> Policy:
    torch.manual_seed(0)
    sharding = sharding or Replicated(precision=precision)
    module = sharding.wrap(load_causal_lm(model_dir, "cpu" if isinstance(sharding, FullyShard) else device))
    opt, sched = build_optimizer(module.parameters(), lr, 0.0, [0.9, 0.999], 0, 10, "constant", 0.0)
    if optimizer_offload:
        offload_optimizer_state(opt)
    return Policy(module, opt, sched, None, settings(micro=3, mini_batch_size=mini), sharding=sharding)


def _grads(policy: Policy) -> list[torch.Tensor]:
    return [(p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).float().cpu()
            for p in policy.module.parameters()]


FP32_TOL, BF16_TOL = (1e-6, 1e-4), (1e-4, 0.05)  # (1 - cosine of the whole gradient, per-tensor relative error)


def _close(a: list[torch.Tensor], b: list[torch.Tensor], tol: tuple[float, float]) -> None:
    x, y = torch.cat([t.flatten() for t in a]), torch.cat([t.flatten() for t in b])
    assert torch.nn.functional.cosine_similarity(x, y, dim=0) > 1 - tol[0]
    for u, v in zip(a, b):
        assert (u - v).norm() <= tol[1] * v.norm() + 1e-7


@pytest.mark.parametrize("compute, tol", [("fp32", FP32_TOL), ("bf16", BF16_TOL)])
def test_autocast_on_cuda_matches_the_cpu_path(random_model_dir, compute, tol):
    out = {}
    for device in ("cpu", "cuda"):
        policy = _policy(random_model_dir, device, Precision.of(compute, device=device))
        metrics = policy.update(batch(policy.module.config.vocab_size))
        log_probs = policy.log_probs(batch(policy.module.config.vocab_size).seqs)
        out[device] = _grads(policy), metrics, log_probs
    _close(out["cuda"][0], out["cpu"][0], tol)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert out["cuda"][1][key] == pytest.approx(out["cpu"][1][key], rel=1e-4 if compute == "fp32" else 1e-2)
    assert (out["cuda"][2] - out["cpu"][2]).abs().max() < (1e-4 if compute == "fp32" else 0.01)


def test_bf16_generation_on_cuda_is_close_to_the_fp32_trainer():
    tok, model = load_tokenizer("tiny-arith"), load_causal_lm("tiny-arith", "cuda")
    g = torch.Generator().manual_seed(0)
    ids, mask = _prompts(tok, [f"What is {a}+{b}?" for a, b in torch.randint(0, 100, (64, 2), generator=g).tolist()], 1)
    ids, mask = ids.cuda(), mask.cuda()
    greedy = SamplingParams(max_new_tokens=8, do_sample=False)
    out = {name: HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id,
                                 precision=Precision.of(name, device="cuda")).generate(ids, mask, greedy,
                                                                                      torch.arange(len(ids)))
           for name in ("fp32", "bf16")}
    width = min(out["fp32"].response_ids.shape[1], out["bf16"].response_ids.shape[1])
    same = (out["fp32"].response_ids[:, :width] == out["bf16"].response_ids[:, :width]).all(1)
    assert int(same.sum()) >= 56  # as on the CPU (tests/unit/rollout/test_bf16_rollout.py)
    assert out["bf16"].response_ids.is_cuda and all(p.dtype == torch.float32 for p in model.parameters())


def _nccl_rank(rank: int, port: int, out: str, model_dir: str) -> None:
    torch.cuda.set_device(rank)
    dp = init_data_parallel(rank, 2, "127.0.0.1", port, timeout_s=120, backend="cpu:gloo,cuda:nccl")
    results = []
    for strategy, compute, reduce in [("ddp", "fp32", "fp32"), ("ddp", "fp32", "bf16"), ("fsdp2", "bf16", "fp32")]:
        precision = Precision.of(compute, reduce, "cuda")
        policy = _policy(model_dir, "cuda", precision, sharding=make_sharding(strategy, dp, "cuda", precision), mini=4)
        policy.update(select(batch(policy.module.config.vocab_size), SHARDS[rank]))
        results.append(_grads(policy))
    torch.save(results, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_nccl_two_ranks_equal_one_gpu(random_model_dir, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    spawn_two_ranks(_nccl_rank, str(tmp_path), random_model_dir)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    whole = _grads(_update_once(_policy(random_model_dir, "cuda", Precision.of(device="cuda"))))
    whole_bf16 = _grads(_update_once(_policy(random_model_dir, "cuda", Precision.of("bf16", device="cuda"))))
    for rank in ranks:
        _close(rank[0], whole, FP32_TOL)  # fp32 all-reduce: the one-GPU gradient
        _close(rank[1], whole, (1e-4, 0.01))  # bf16 all-reduce
        assert all(torch.equal(g, g.bfloat16().float()) for g in rank[1])
        _close(rank[2], whole_bf16, BF16_TOL)  # fsdp2 in bf16 (gathered bf16 weights) vs bf16 autocast
    for a, b in zip(ranks[0][0], ranks[1][0]):
        assert torch.equal(a, b)


def _update_once(policy: Policy) -> Policy:
    policy.update(batch(policy.module.config.vocab_size))
    return policy


def _offload_rank(_: int, out: str, model_dir: str) -> None:
    """One process, one GPU: fsdp2 with param_offload is a one-rank FSDP2 with CPUOffloadPolicy."""
    precision = Precision.of("bf16", device="cuda")
    sharding = make_sharding("fsdp2", SINGLE, "cuda", precision, param_offload=True)
    policy = _policy(model_dir, "cuda", precision, lr=1e-3, sharding=sharding)
    result = {"fully_shard": isinstance(sharding, FullyShard), "device": str(policy.device),
              "before": {n: p.full_tensor().cpu().clone() for n, p in policy.module.named_parameters()}}
    policy.update(batch(policy.module.config.vocab_size))
    result["grads"] = _grads(policy)
    result["param_devices"] = {p.to_local().device.type for p in policy.module.parameters()}
    result["moment_devices"] = {v.to_local().device.type if hasattr(v, "to_local") else v.device.type
                                for s in policy.optimizer.state.values() for k, v in s.items() if k != "step"}
    result["after"] = {n: p.full_tensor().cpu() for n, p in policy.module.named_parameters()}
    torch.save(result, f"{out}/offload.pt")
    torch.distributed.destroy_process_group()


def test_fsdp2_cpu_offload_trains_on_one_gpu(random_model_dir, tmp_path):
    mp.start_processes(_offload_rank, args=(str(tmp_path), random_model_dir), nprocs=1, start_method="spawn")
    got = torch.load(tmp_path / "offload.pt", weights_only=False)
    assert got["fully_shard"] and got["device"] == "cuda"
    assert got["param_devices"] == {"cpu"} and got["moment_devices"] == {"cpu"}  # host-resident between passes
    plain = _update_once(_policy(random_model_dir, "cuda", Precision.of("bf16", device="cuda")))
    _close(got["grads"], _grads(plain), BF16_TOL)  # gathered bf16 weights vs bf16 autocast over fp32
    assert any(not torch.equal(got["before"][n], got["after"][n]) for n in got["before"])


def test_optimizer_offload_round_trip_keeps_the_updates_equal(random_model_dir):
    plain = _policy(random_model_dir, "cuda", Precision.of(device="cuda"), lr=1e-3)
    offloaded = _policy(random_model_dir, "cuda", Precision.of(device="cuda"), lr=1e-3, optimizer_offload=True)
    for step in range(3):
        data = select(batch(plain.module.config.vocab_size), torch.arange(8).roll(step))
        plain.update(data), offloaded.update(data)
        moments = [v for s in offloaded.optimizer.state.values() for k, v in s.items() if k != "step"]
        assert moments and all(m.device.type == "cpu" for m in moments)  # on the host between steps
        assert all(p.is_cuda for p in offloaded.module.parameters())
    sharding, module, opt = offloaded.sharding, offloaded.module, offloaded.optimizer  # resume: a checkpoint's
    sharding.load_optimizer_state(module, opt, sharding.optimizer_state(module, opt))  # state loads and steps on
    data = batch(plain.module.config.vocab_size)
    plain.update(data), offloaded.update(data)
    for a, b in zip(plain.module.parameters(), offloaded.module.parameters()):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)


def test_offloaded_reference_waits_on_the_host(random_model_dir):
    seqs = batch(load_causal_lm(random_model_dir).config.vocab_size).seqs
    on_gpu = Reference(load_causal_lm(random_model_dir, "cuda"), 1.0, 3).log_probs(seqs)
    module = load_causal_lm(random_model_dir, "cpu", torch.bfloat16).eval().requires_grad_(False)
    ref = Reference(module, 1.0, 3, view=lambda: on_device(module, "cuda"), precision=Precision.of("bf16", device="cuda"))
    seen = []
    module.model.layers[0].register_forward_pre_hook(lambda m, i: seen.append(next(m.parameters()).device.type))
    got = ref.log_probs(seqs)
    assert seen and set(seen) == {"cuda"}  # computed on the GPU ...
    assert all(p.device.type == "cpu" for p in module.parameters())  # ... and back on the host after
    assert (got - on_gpu).abs().max() < 0.01


def test_short_run_on_cuda_with_every_lever(arith_data, tmp_path):
    from hybridrl import cli

    run_dir = tmp_path / "run"
    assert cli.main(["train", f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}",
              "data.val_max_samples=16", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.rollout.n=4",
              "trainer.total_training_steps=2", "trainer.test_freq=2",
              "trainer.logger=[file]", f"trainer.default_local_dir={run_dir}", "trainer.device=cuda",
              "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.model.enable_gradient_checkpointing=true",
              "actor_rollout_ref.model.share_prompt_prefix=false",
              "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
              "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
              "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16", "actor_rollout_ref.ref.fsdp_config.param_offload=true",
              "actor_rollout_ref.rollout.dtype=bfloat16", "trainer.save_freq=0"]) == 0
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    train = [r for r in rows if "actor/pg_loss" in r]
    assert len(train) == 2
    for r in train:
        assert all(v == v and abs(v) != float("inf") for v in r.values() if isinstance(v, float))
        assert 0 < r["training/rollout_probs_diff_max"] < 0.5  # bf16 engine vs bf16 trainer: a real, small gap
    assert any("val-core/arithmetic/reward/mean@1" in r for r in rows)
