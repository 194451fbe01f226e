"""actor.strategy=fsdp2 on the CPU: torch FSDP2 (`fully_shard`) over two gloo ranks.

What must hold beyond the exact gradients (test_dp.py): each rank really keeps half of every
parameter; generation and log-probs, which run a different number of forwards on each rank, neither
hang nor differ from an unsharded model; an update with lr > 0 lands on the single-process weights;
and state leaves and re-enters the role whole (optimizer state, HF folder), so a checkpoint does
not depend on the strategy.
"""

from __future__ import annotations

import sys

import pytest
import torch

from hybridrl.batch import PromptBatch, select
from hybridrl.parallel.dp import SINGLE, init_data_parallel
from hybridrl.parallel.sharding import FullyShard, make_sharding
from hybridrl.models.loading import load_causal_lm
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf import HFRolloutEngine
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.policy import Policy

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/unit/workers")
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ranks import finish_rank, rank_results  # noqa: E402
from test_policy import batch, settings  # noqa: E402

pytestmark = pytest.mark.slow  # spawns its data-parallel ranks (torch.distributed over gloo, 20-45 s of start-up on 2 cores): `make test-slow`

SHARDS = [torch.arange(0, 4), torch.arange(4, 8)]
PROMPTS = [torch.arange(0, 3), torch.arange(3, 4)]  # rank 0 generates for 3 prompts, rank 1 for 1
MAX_NEW = [7, 3]  # and for a different number of steps: their forward counts differ


def _policy(model_dir: str, dp, strategy: str, lr: float, mini: int) -> Policy:
    torch.manual_seed(0)
    sharding = make_sharding(strategy, dp)
    module = sharding.wrap(load_causal_lm(model_dir))
    opt, sched = build_optimizer(module.parameters(), lr, 0.0, [0.9, 0.999], 0, 10, "constant", 0.0)
    engine = HFRolloutEngine(module, [2], 0, seed=3, max_num_seqs=2)  # 2: several KV-cache chunks per call
    return Policy(module, opt, sched, engine, settings(micro=2, mini_batch_size=mini, grad_clip=1.0), sharding=sharding)


def _prompts(vocab: int) -> PromptBatch:
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, vocab, (4, 5), generator=g)
    mask = torch.ones(4, 5, dtype=torch.long)
    mask[1, :2] = 0  # one left-padded prompt
    return PromptBatch(ids * mask, mask, ["a"] * 4, ["0"] * 4, [10, 11, 12, 13])


def _run(policy: Policy, rows, prompt_rows, max_new: int) -> dict:
    vocab = policy.module.config.vocab_size
    data = batch(vocab)
    out = {"rollout": policy.generate(select(_prompts(vocab), prompt_rows), 2, SamplingParams(max_new, 1.0)),
           "log_probs": policy.log_probs(select(data.seqs, rows[:3] if len(rows) > 3 else rows))}
    out["metrics"] = policy.update(select(data, rows))
    out["weights"] = policy.sharding.full_state_dict(policy.module)
    out["optimizer"] = policy.state_dict()
    return out


def _rank(rank: int, port: int, out: str, model_dir: str) -> None:
    torch.set_num_threads(1)
    dp = init_data_parallel(rank, 2, "127.0.0.1", port, timeout_s=60)  # a hang would fail here after 60 s
    policy = _policy(model_dir, dp, "fsdp2", 1e-2, 4)
    assert isinstance(policy.sharding, FullyShard)
    local = {name: tuple(p.to_local().shape) for name, p in policy.module.named_parameters()}
    result = _run(policy, SHARDS[rank], PROMPTS[rank], MAX_NEW[rank])
    result["local_shapes"] = local
    # the same state into a fresh sharded policy, from the whole tensors every rank holds
    policy.save_pretrained(f"{out}/hf")
    torch.distributed.barrier()
    fresh = _policy(model_dir, dp, "fsdp2", 1e-2, 4)
    fresh.load_pretrained(f"{out}/hf")
    fresh.load_state_dict(result["optimizer"])
    result["reloaded_weights"] = fresh.sharding.full_state_dict(fresh.module)
    result["reloaded_optimizer"] = fresh.state_dict()
    finish_rank(out, rank, result)


@pytest.fixture(scope="module")
def fsdp_results(random_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    return out, rank_results(_rank, out, random_model_dir)


@pytest.fixture(scope="module")
def single(random_model_dir):
    """One process, whole model: generation and log-probs per rank's rows, and the update on all 8 rows."""
    per_rank = []
    for rank in range(2):
        policy = _policy(random_model_dir, SINGLE, "ddp", 1e-2, 8)
        vocab = policy.module.config.vocab_size
        data = batch(vocab)
        rows = SHARDS[rank]
        per_rank.append({
            "rollout": policy.generate(select(_prompts(vocab), PROMPTS[rank]), 2, SamplingParams(MAX_NEW[rank], 1.0)),
            "log_probs": policy.log_probs(select(data.seqs, rows[:3]))})
    policy = _policy(random_model_dir, SINGLE, "ddp", 1e-2, 8)
    metrics = policy.update(batch(policy.module.config.vocab_size))
    return per_rank, metrics, policy.module.state_dict()


def test_each_rank_holds_half_of_every_parameter(fsdp_results, random_model_dir):
    _, ranks = fsdp_results
    whole = dict(load_causal_lm(random_model_dir).named_parameters())
    for name, shape in ranks[0]["local_shapes"].items():
        rows = whole[name].shape[0]
        assert shape[0] == (rows + 1) // 2, name  # FSDP2 shards dim 0; rank 0 gets the larger half
        assert ranks[1]["local_shapes"][name][0] == rows - shape[0], name


def test_generation_and_log_probs_on_gathered_weights_match_one_process(fsdp_results, single):
    _, ranks = fsdp_results
    per_rank, _, _ = single
    for rank in range(2):
        got, want = ranks[rank]["rollout"], per_rank[rank]["rollout"]
        assert torch.equal(got.response_ids, want.response_ids)
        assert torch.allclose(got.rollout_log_probs, want.rollout_log_probs, atol=1e-5)
        assert torch.allclose(ranks[rank]["log_probs"], per_rank[rank]["log_probs"], atol=1e-5)


def test_sharded_update_lands_on_the_single_process_weights(fsdp_results, single, random_model_dir):
    _, ranks = fsdp_results
    _, metrics, weights = single
    initial = load_causal_lm(random_model_dir).state_dict()
    for rank in ranks:
        assert rank["metrics"]["actor/grad_norm"] == pytest.approx(metrics["actor/grad_norm"], rel=1e-4)
        assert rank["metrics"]["actor/pg_loss"] == pytest.approx(metrics["actor/pg_loss"], rel=1e-4, abs=1e-7)
        moved = 0.0
        for name, w in weights.items():
            if name in rank["weights"]:
                assert torch.allclose(rank["weights"][name], w, atol=2e-6), name
                moved = max(moved, float((w - initial[name]).abs().max()))
        assert moved > 1e-3  # lr 1e-2 really moved the weights


def test_state_round_trips_whole(fsdp_results):
    out, ranks = fsdp_results
    for rank in ranks:
        for name, w in rank["weights"].items():
            assert torch.equal(rank["reloaded_weights"][name], w), name
        want, got = rank["optimizer"]["optimizer"]["state"], rank["reloaded_optimizer"]["optimizer"]["state"]
        assert want.keys() == got.keys() and len(want) > 0
        for name in want:
            assert torch.equal(got[name]["exp_avg_sq"], want[name]["exp_avg_sq"]), name
    # the optimizer state is keyed by parameter name, whole: what a ddp run would write
    assert all(isinstance(k, str) for k in ranks[0]["optimizer"]["optimizer"]["state"])
    # rank 0 wrote a plain HF folder that loads without hybridrl
    reloaded = load_causal_lm(str(out / "hf")).state_dict()
    for name, w in ranks[0]["weights"].items():
        assert torch.equal(reloaded[name], w), name
