"""Token-budget micro-batches under fsdp2: every training forward all-gathers each layer, so ranks
whose rows need different micro-batch counts must still run the same number (the largest); the
update still equals one process's (padded and packed layouts)."""

from __future__ import annotations

import sys

import pytest
import torch

from hybridrl.batch import select
from hybridrl.parallel.dp import SINGLE, init_data_parallel
from hybridrl.parallel.sharding import make_sharding
from hybridrl.models.forward import Layout
from hybridrl.models.loading import load_causal_lm
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.policy import Policy
from hybridrl.workers.update_loop import micro_batch_rows_of

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/unit/workers")
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ranks import finish_rank, rank_results  # noqa: E402
from test_policy import batch, settings  # noqa: E402

pytestmark = pytest.mark.slow  # spawns its data-parallel ranks (torch.distributed over gloo, 20-45 s of start-up on 2 cores): `make test-slow`

# rows of test_policy.batch hold 6, 11, 7, 11, 8, 10, 9, 11 tokens: rank 0 gets the long ones (43 tokens:
# 4 micro-batches of <= 16), rank 1 the short ones (30 tokens: 2 micro-batches)
SHARDS = [torch.tensor([1, 3, 5, 7]), torch.tensor([0, 2, 4, 6])]
BUDGET = 16
LAYOUTS = {"padded": Layout(), "packed": Layout(packed=True)}


def _policy(model_dir: str, dp, strategy: str, mini: int, layout: Layout) -> Policy:
    torch.manual_seed(0)
    sharding = make_sharding(strategy, dp)
    module = sharding.wrap(load_causal_lm(model_dir))
    opt, sched = build_optimizer(module.parameters(), 1e-2, 0.0, [0.9, 0.999], 0, 10, "constant", 0.0)
    s = settings(micro=2, mini_batch_size=mini, grad_clip=1.0, max_tokens=BUDGET, layout=layout)
    return Policy(module, opt, sched, None, s, sharding=sharding)


def _rank(rank: int, port: int, out: str, model_dir: str) -> None:
    torch.set_num_threads(1)
    dp = init_data_parallel(rank, 2, "127.0.0.1", port, timeout_s=60)  # a rank short of forwards would hang here
    results = {}
    for name, layout in LAYOUTS.items():
        policy = _policy(model_dir, dp, "fsdp2", 4, layout)
        data = select(batch(policy.module.config.vocab_size), SHARDS[rank])
        forwards = []
        hook = policy.module.register_forward_hook(lambda *_: forwards.append(1))
        metrics = policy.update(data)
        hook.remove()
        results[name] = {"metrics": metrics, "forwards": len(forwards),
                         "weights": policy.sharding.full_state_dict(policy.module)}
    finish_rank(out, rank, results)


@pytest.fixture(scope="module")
def ranks(random_model_dir, tmp_path_factory):
    return rank_results(_rank, tmp_path_factory.mktemp("fsdp_budget"), random_model_dir)


def test_the_ranks_need_different_counts_alone():
    seqs = batch(320).seqs
    counts = [len(micro_batch_rows_of(select(seqs, rows), settings(micro=2, max_tokens=BUDGET).update_batching, False))
              for rows in SHARDS]
    assert counts == [4, 2]


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_sharded_token_budget_update_runs_in_lockstep_and_equals_one_process(ranks, random_model_dir, name):
    single = _policy(random_model_dir, SINGLE, "ddp", 8, LAYOUTS[name])
    metrics = single.update(batch(single.module.config.vocab_size))
    for rank in ranks:
        got = rank[name]
        assert got["forwards"] == 4  # the short rank ran the long rank's count
        assert got["metrics"]["actor/grad_norm"] == pytest.approx(metrics["actor/grad_norm"], rel=1e-4)
        assert got["metrics"]["actor/pg_loss"] == pytest.approx(metrics["actor/pg_loss"], rel=1e-4, abs=1e-7)
        # the micro-batches differ from one process's (other rows together), so the gradients agree to float
        # rounding only; AdamW's first step moves a weight by about lr * g / |g|, which turns that rounding on
        # near-zero gradients (unused embedding rows) into up to ~1e-5 of the lr=1e-2 step
        for key, w in single.module.state_dict().items():
            if key in got["weights"]:
                torch.testing.assert_close(got["weights"][key], w, atol=5e-5, rtol=0)
