"""The rollout sources (trainer/sources.py) against fakes: what each gives the loop (the batch, its lag and
behaviour, the metrics), and which calls reach the async queue."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.rewards.manager import RewardOutput
from hybridrl.trainer.source_choice import rollout_source
from hybridrl.trainer.sources import AsyncSource, SyncSource


def prompts(index: list[int]) -> PromptBatch:
    return PromptBatch(torch.full((len(index), 3), 7), torch.ones(len(index), 3, dtype=torch.long), ["toy"] * len(index),
                       [str(i) for i in index], index)


def rollout_of(p: PromptBatch, n: int, logp: float) -> Rollout:
    rep = p.repeat_interleave(n)
    N = len(rep.index)
    return Rollout(rep, torch.full((N, 2), 5), torch.ones(N, 2, dtype=torch.long), torch.full((N, 2), logp),
                   torch.arange(len(p.index)).repeat_interleave(n))


def inputs(batches: list[list[int]], generated: list):
    """Prompts from `batches` in order; the policy's generate calls recorded in `generated`; every response scores 1."""
    order = iter(batches)

    def generate(p, n, sampling):
        generated.append((p.index, n))
        return rollout_of(p, n, -1.0)

    def score(r: Rollout) -> RewardOutput:
        ones = torch.ones(len(r.uid))
        return RewardOutput(ones, ones, torch.zeros_like(ones), torch.zeros(len(ones), dtype=torch.bool),
                            details=[{}] * len(ones))

    return SimpleNamespace(train_data=SimpleNamespace(collate=lambda idx, pad: prompts(idx)), pad_id=0,
                           sampler=SimpleNamespace(next_batch=lambda: next(order)),
                           policy=SimpleNamespace(generate=generate), sampling=None, reward=SimpleNamespace(score=score))


class FakeQueue:
    """AsyncRollouts' surface: each batch taken was generated `lag` steps behind, with π_old from the rollout."""

    n, lag, behaviour = 2, 0, None

    def __init__(self):
        self.calls = []

    def start(self, first_step):
        self.calls.append(("start", first_step))

    def take(self, p, m):
        self.calls.append(("take", p.index))
        self.lag, self.behaviour = 2, "rollout"
        m["async/staleness_max"] = 2.0
        return rollout_of(p, self.n, -3.0)

    def after_update(self, step):
        self.calls.append(("after_update", step))

    def close(self):
        self.calls.append(("close",))


def test_the_sync_source_generates_each_batch_when_asked_on_policy():
    generated, m = [], {}
    source = SyncSource(inputs([[4, 5], [6, 7]], generated), n=3, num_groups=2, group_filter=None)
    source.start(1)
    batch = source.next_batch(1, m)
    assert generated == [([4, 5], 3)]  # the sampler's next prompts, n responses each, by the policy now
    assert batch.rollout.prompts.index == [4, 4, 4, 5, 5, 5] and batch.reward.rewards.tolist() == [1.0] * 6
    assert (batch.lag, batch.behaviour) == (0, None)
    source.after_update(1, m)
    source.close()
    assert sorted(m) == ["timing_s/gen", "timing_s/reward"]  # no weight sync of its own: the update syncs the engine


def test_the_async_source_takes_the_pools_batch_with_its_lag_and_syncs_through_the_queue():
    generated, queue, m = [], FakeQueue(), {}
    source = AsyncSource(inputs([[1, 2]], generated), queue, num_groups=2)
    source.start(3)
    batch = source.next_batch(3, m)
    assert generated == []  # nothing generated on the trainer
    assert batch.rollout.rollout_log_probs.unique().tolist() == [-3.0]  # the queue's rollout
    assert (batch.lag, batch.behaviour) == (2, "rollout")
    source.after_update(3, m)
    source.close()
    assert queue.calls == [("start", 3), ("take", [1, 2]), ("after_update", 3), ("close",)]
    assert sorted(m) == ["async/staleness_max", "timing_s/gen", "timing_s/reward", "timing_s/sync_rollout_weights"]


def test_the_run_gets_the_async_source_only_with_a_rollout_pool():
    run = inputs([], [])
    sync = rollout_source(load_config(RLConfig, None, []), run, 4, 8, None, 10, pool=None)
    pooled = rollout_source(load_config(RLConfig, None, ["rollout.n_gpus_per_node=1", "rollout.nnodes=1"]), run, 4,
                            8, None, 10, pool=object())
    assert isinstance(sync, SyncSource) and isinstance(pooled, AsyncSource)
    assert (pooled.rollouts.n, pooled.rollouts.schedule.total_steps) == (4, 10)
