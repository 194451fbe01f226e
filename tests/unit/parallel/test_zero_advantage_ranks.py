"""Skipping zero-advantage rows on two ranks: a rank whose rows all have advantage 0 runs no forward under
ddp (zero gradients join the one all-reduce) and runs filler rows under fsdp2 (every training forward
all-gathers, so ranks run the same count); the update equals one process's without skipping."""

from __future__ import annotations

import sys

import pytest
import torch

from hybridrl.batch import TrainBatch, select
from hybridrl.parallel.dp import SINGLE, init_data_parallel
from hybridrl.parallel.sharding import make_sharding
from hybridrl.models.loading import load_causal_lm
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.policy import Policy

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/unit/workers")
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ranks import finish_rank, rank_results  # noqa: E402
from test_policy import grouped_batch, settings  # noqa: E402

pytestmark = pytest.mark.slow  # spawns its data-parallel ranks (torch.distributed over gloo, 20-45 s of start-up on 2 cores): `make test-slow`

SHARDS = [torch.tensor([0, 1, 4, 5, 6, 7]), torch.tensor([2, 3, 8, 9, 10, 11])]  # rank 0: no gradient at all
STRATEGIES = ["ddp", "fsdp2"]


def data(vocab: int) -> TrainBatch:
    b = grouped_batch(vocab)
    adv = b.advantages.clone()
    adv[SHARDS[0]] = 0.0
    return TrainBatch(b.seqs, adv, b.rollout_log_probs, b.old_log_probs, b.ref_log_probs)


def _policy(model_dir: str, dp, strategy: str, mini: int, skip: bool) -> Policy:
    sharding = make_sharding(strategy, dp)
    module = sharding.wrap(load_causal_lm(model_dir))
    opt, sched = build_optimizer(module.parameters(), 1e-2, 0.01, [0.9, 0.999], 0, 10, "constant", 0.0)
    s = settings(micro=2, mini_batch_size=mini, grad_clip=1.0, entropy_coeff=0.0, use_kl_loss=False,
                 skip_zero_advantage=skip)
    return Policy(module, opt, sched, None, s, sharding=sharding)


def weights(policy: Policy) -> dict[str, torch.Tensor]:
    """The whole weights now (under ddp full_state_dict shares the live parameters' storage: copy them)."""
    return {k: v.clone() for k, v in policy.sharding.full_state_dict(policy.module).items()}


def _rank(rank: int, port: int, out: str, model_dir: str) -> None:
    torch.set_num_threads(1)
    dp = init_data_parallel(rank, 2, "127.0.0.1", port, timeout_s=60)  # a rank short of a collective would hang
    results = {}
    for strategy in STRATEGIES:
        policy = _policy(model_dir, dp, strategy, 6, skip=True)
        forwards = []
        hook = policy.module.register_forward_hook(lambda *_: forwards.append(1))
        metrics = policy.update(select(data(policy.module.config.vocab_size), SHARDS[rank]))
        hook.remove()
        results[strategy] = {"metrics": metrics, "forwards": len(forwards), "weights": weights(policy)}
        # then a mini-batch with no gradient on any rank: no backward anywhere, AdamW still steps (momentum),
        # and the metrics come from a forward without gradients, which under fsdp2 is again a collective
        flat = select(data(policy.module.config.vocab_size), SHARDS[rank])
        flat = TrainBatch(flat.seqs, torch.zeros_like(flat.advantages), flat.rollout_log_probs, flat.old_log_probs,
                          flat.ref_log_probs)
        results[strategy]["flat_metrics"] = policy.update(flat)
        results[strategy]["flat_weights"] = weights(policy)
    finish_rank(out, rank, results)


@pytest.fixture(scope="module")
def ranks(random_model_dir, tmp_path_factory):
    return rank_results(_rank, tmp_path_factory.mktemp("zero_adv_ranks"), random_model_dir)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_rank_without_gradient_keeps_in_step_and_the_update_is_one_process_s(ranks, random_model_dir, strategy):
    single = _policy(random_model_dir, SINGLE, "ddp", 12, skip=False)
    rows = torch.cat(SHARDS)  # the ranks' rows in rank order: the mini-batch the two ranks hold together
    metrics = single.update(select(data(single.module.config.vocab_size), rows))
    # rank 1's 6 rows are 3 micro-batches of 2; rank 0 has none to compute: nothing under ddp, filler under fsdp2
    assert [r[strategy]["forwards"] for r in ranks] == ([0, 3] if strategy == "ddp" else [3, 3])
    for rank in ranks:
        got = rank[strategy]
        # the share of the mini-batch's responses not computed: fsdp2's filler rows were
        assert got["metrics"]["actor/skipped_frac"] == pytest.approx(0.5 if strategy == "ddp" else 0.25)
        assert got["metrics"]["actor/grad_norm"] == pytest.approx(metrics["actor/grad_norm"], rel=1e-4)
        assert got["metrics"]["actor/pg_loss"] == pytest.approx(metrics["actor/pg_loss"], rel=1e-4, abs=1e-7)
        for key, w in single.module.state_dict().items():
            if key in got["weights"]:
                torch.testing.assert_close(got["weights"][key], w, atol=5e-5, rtol=0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_mini_batch_without_gradient_on_any_rank_still_steps_and_reports(ranks, random_model_dir, strategy):
    single = _policy(random_model_dir, SINGLE, "ddp", 12, skip=False)
    batch = select(data(single.module.config.vocab_size), torch.cat(SHARDS))
    single.update(batch)
    want = single.update(TrainBatch(batch.seqs, torch.zeros_like(batch.advantages), batch.rollout_log_probs,
                                    batch.old_log_probs, batch.ref_log_probs))
    for rank in ranks:
        got = rank[strategy]
        assert got["flat_metrics"]["actor/skipped_frac"] == 1.0 and got["flat_metrics"]["actor/grad_norm"] == 0.0
        for key in ("actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac", "training/rollout_probs_diff_max"):
            assert got["flat_metrics"][key] == pytest.approx(want[key], rel=1e-4, abs=1e-7), key
        moved = [k for k in got["weights"] if not torch.equal(got["weights"][k], got["flat_weights"][k])]
        assert moved  # AdamW's momentum moved the weights though the gradient was zero
        for key, w in single.module.state_dict().items():
            if key in got["flat_weights"]:
                torch.testing.assert_close(got["flat_weights"][key], w, atol=1e-4, rtol=0)
