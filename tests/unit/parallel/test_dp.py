"""Data parallelism is exact: two gloo ranks, each updating on half of a mini-batch, produce the
single-process gradient and metrics (global token normalisation, summed gradients), whether each
rank holds the whole model (ddp) or a shard of it (fsdp2: torch FSDP2 on gloo, on the CPU)."""

from __future__ import annotations

import sys

import pytest
import torch

from hybridrl.batch import select
from hybridrl.parallel.dp import init_data_parallel
from hybridrl.parallel.sharding import make_sharding
from hybridrl.models.loading import load_causal_lm, load_value_model
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.critic import Critic, CriticSettings
from hybridrl.workers.policy import Policy

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/unit/workers")
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ranks import spawn_two_ranks  # noqa: E402
from test_critic import critic_batch  # noqa: E402
from test_policy import batch, settings  # noqa: E402

pytestmark = pytest.mark.slow  # spawns its data-parallel ranks (torch.distributed over gloo, 20-45 s of start-up on 2 cores): `make test-slow`

# the shards are uneven in tokens (rows 0-3 hold 15 response tokens, rows 4-7 hold 21): a per-rank
# mean would weight them wrongly
SHARDS = [torch.arange(0, 4), torch.arange(4, 8)]


def _full(t: torch.Tensor) -> torch.Tensor:
    """A whole tensor from a sharded one (FSDP2's DTensor; a collective), or the tensor itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _update(role: str, model_dir: str, micro: int, mode: str, rows=None, dp=None, strategy: str = "ddp"):
    """(grads, metrics) of one update with lr 0, on `rows` of the batch (all when None)."""
    from hybridrl.parallel.dp import SINGLE

    torch.manual_seed(0)
    sharding = make_sharding(strategy, dp or SINGLE)
    if role == "actor":
        module = sharding.wrap(load_causal_lm(model_dir))
        data = batch(module.config.vocab_size)
        s = settings(micro=micro, mode=mode, mini_batch_size=8 if rows is None else len(rows))
        make = lambda opt, sched: Policy(module, opt, sched, engine=None, settings=s, sharding=sharding)  # noqa: E731
    else:
        module = sharding.wrap(load_value_model(model_dir, "critic.model.path"))
        data = critic_batch(module.config.vocab_size)
        s = CriticSettings(mini_batch_size=8 if rows is None else len(rows), micro_batch_size=micro,
                           forward_micro_batch_size=8, ppo_epochs=1, shuffle=False, cliprange_value=0.2,
                           loss_agg_mode=mode, grad_clip=1e9)
        make = lambda opt, sched: Critic(module, opt, sched, s, sharding=sharding)  # noqa: E731
    opt, sched = build_optimizer(module.parameters(), 0.0, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)
    metrics = make(opt, sched).update(data if rows is None else select(data, rows))
    return [_full(p.grad).clone() for p in module.parameters()], metrics


# (role, loss_agg_mode, micro-batch size, strategy). The critic keeps the single process's
# micro-batches: its clip fraction counts tokens past a threshold, and a value that moves by 1e-7
# with the batch's composition may cross it. fsdp2 with 2 micro-batches per rank checks that the
# gradients accumulated without a reduce-scatter (set_requires_gradient_sync) are summed once.
CASES = [("actor", "token-mean", 4, "ddp"), ("actor", "seq-mean-token-mean", 3, "ddp"),
         ("actor", "seq-mean-token-sum-norm", 4, "ddp"), ("critic", "token-mean", 4, "ddp"),
         ("actor", "token-mean", 2, "fsdp2"), ("actor", "seq-mean-token-sum-norm", 4, "fsdp2"),
         ("critic", "token-mean", 4, "fsdp2")]


def _rank(rank: int, port: int, out: str, model_dir: str) -> None:
    torch.set_num_threads(1)
    dp = init_data_parallel(rank, 2, "127.0.0.1", port, timeout_s=60)
    for i, (role, mode, micro, strategy) in enumerate(CASES):
        torch.save(_update(role, model_dir, micro, mode, SHARDS[rank], dp, strategy), f"{out}/case{i}_rank{rank}.pt")
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def two_rank_results(random_model_dir, tmp_path_factory):
    """Every case run by two gloo ranks in one spawn (process start-up dominates)."""
    out = tmp_path_factory.mktemp("dp")
    spawn_two_ranks(_rank, str(out), random_model_dir)
    return {i: [torch.load(out / f"case{i}_rank{r}.pt", weights_only=False) for r in range(2)]
            for i in range(len(CASES))}


@pytest.mark.parametrize("case", range(len(CASES)), ids=["-".join(map(str, c)) for c in CASES])
def test_two_ranks_on_half_batches_equal_one_process_on_the_whole(random_model_dir, two_rank_results, case):
    role, mode, micro, _ = CASES[case]
    full_grads, full_metrics = _update(role, random_model_dir, micro, mode)
    ranks = two_rank_results[case]
    assert any(g.abs().sum() > 0 for g in full_grads)
    for grads, metrics in ranks:
        for a, b in zip(full_grads, grads):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
        assert metrics.keys() == full_metrics.keys()
        for key, value in full_metrics.items():
            assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    for a, b in zip(ranks[0][0], ranks[1][0]):  # the replicas stay identical
        assert torch.equal(a, b)
