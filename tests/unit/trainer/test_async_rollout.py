"""The async rollout queue's schedule (trainer/async_rollout.py) against a recording fake pool: which weights
generate which batch, as what draw call, and when each is submitted."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hybridrl.data.sampler import PromptSampler
from hybridrl.errors import HybridRLError
from hybridrl.trainer.async_rollout import AsyncRollouts
from hybridrl.trainer.async_schedule import AsyncSchedule


class Got(tuple):
    """A generation's (draw call, weights version), standing in for a Rollout without per-token versions."""

    token_versions = None


class FakePool:
    """Records pushes and submissions; a generation's 'rollout' is (draw call, weights version it ran after)."""

    def __init__(self):
        self.log, self.weights = [], None

    def push_weights(self, weights, version):
        self.log.append(("push", version))
        self.weights = version
        return [f"push {version}"]

    def submit(self, prompts, n, sampling, call):
        self.log.append(("gen", call))
        return [(call, self.weights)]

    def wait_pushes(self, refs):
        pass

    def gather(self, refs):
        return Got(refs[0])


class FakeData:
    def collate(self, index, pad_id):
        return SimpleNamespace(index=index)


def queue(pool, sampler, total: int, sync_every: int, ahead: int) -> AsyncRollouts:
    inputs = SimpleNamespace(policy=SimpleNamespace(engine_weights=lambda: "w"), train_data=FakeData(),
                             sampler=sampler, pad_id=0, sampling=None)
    return AsyncRollouts(pool, inputs, 2, AsyncSchedule(total_steps=total, sync_every=sync_every, ahead=ahead,
                                                        prox=False))


def run_schedule(total: int, sync_every: int, ahead: int, first: int = 1):
    """Trains steps first..total like the driver: take, update, push. Returns the pool, the (call, version)
    each step got, and each step's metrics."""
    pool, trainer_sampler = FakePool(), PromptSampler(100, 4, seed=0)
    for _ in range(first - 1):  # a resumed run's sampler holds the steps trained
        trainer_sampler.next_batch()
    source = queue(pool, trainer_sampler, total, sync_every, ahead)
    source.start(first)
    got, metrics = [], []
    for step in range(first, total + 1):
        m = {}
        got.append(source.take(SimpleNamespace(index=trainer_sampler.next_batch()), m))
        metrics.append(m)
        source.after_update(step)
    return pool, got, metrics


def test_staleness_0_trigger_1_is_synchronous():
    # B = 1: batch k is submitted right after step k-1's push, as train call k-1
    pool, got, metrics = run_schedule(total=3, sync_every=1, ahead=1)
    assert got == [(0, 0), (1, 1), (2, 2)]
    assert pool.log == [("push", 0), ("gen", 0), ("push", 1), ("gen", 1), ("push", 2), ("gen", 2)]
    assert [m["async/staleness_max"] for m in metrics] == [0.0, 0.0, 0.0]
    assert [m["async/in_flight"] for m in metrics] == [0.0, 0.0, 0.0]


def test_one_step_off_generates_batch_k_from_the_weights_of_step_k_minus_2():
    # staleness 1, trigger 1: B = 2, so batches 1 and 2 start from the initial weights; no push after the last
    # submission is needed (step 3's push would feed no batch)
    pool, got, metrics = run_schedule(total=4, sync_every=1, ahead=2)
    assert got == [(0, 0), (1, 0), (2, 1), (3, 2)]
    assert [m["async/staleness_max"] for m in metrics] == [0.0, 1.0, 1.0, 1.0]
    assert [m["async/in_flight"] for m in metrics] == [1.0, 1.0, 1.0, 0.0]
    assert pool.log == [("push", 0), ("gen", 0), ("gen", 1), ("push", 1), ("gen", 2), ("push", 2), ("gen", 3)]


def test_trigger_2_staleness_0_pushes_every_other_step():
    # verl's bound: at most (1 + 0) x 2 batches per sync window, from the weights of the window's start
    pool, got, metrics = run_schedule(total=6, sync_every=2, ahead=2)
    assert [v for _, v in got] == [0, 0, 2, 2, 4, 4]
    assert [m["async/staleness_max"] for m in metrics] == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert [e for e in pool.log if e[0] == "push"] == [("push", 0), ("push", 2), ("push", 4)]


def test_a_resumed_run_starts_from_the_checkpoint_weights_with_lag_0():
    pool, got, metrics = run_schedule(total=4, sync_every=1, ahead=2, first=3)
    assert got == [(2, 2), (3, 2)]  # the sampler's and the draws' positions are those of the uninterrupted run
    assert [m["async/staleness_max"] for m in metrics] == [0.0, 1.0]


def test_a_batch_for_other_prompts_is_an_error_not_a_silent_mix_up():
    pool, sampler = FakePool(), PromptSampler(100, 4, seed=0)
    source = queue(pool, sampler, total=3, sync_every=1, ahead=1)
    source.start(1)
    with pytest.raises(HybridRLError, match="batch of step 1 was generated for prompts"):
        source.take(SimpleNamespace(index=[-1, -2, -3, -4]), {})


def test_token_staleness_counts_each_token_at_its_own_version_and_flags_interrupted_responses():
    import torch

    from hybridrl.trainer.async_rollout import token_staleness

    versions = torch.tensor([[3, 3, 4, -1], [4, 4, 4, 4], [3, -1, -1, -1]])  # row 0 interrupted by the push of 4
    mask = (versions >= 0).long()
    m = token_staleness(versions, mask, trainer_version=4)
    assert m["async/staleness_token_mean"] == pytest.approx(3 / 8) and m["async/staleness_max"] == 1.0
    assert m["async/interrupted_frac"] == pytest.approx(1 / 3)
