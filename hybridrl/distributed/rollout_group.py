"""The async rollout pool's driver side: weight pushes and generations submitted ahead of need, gathered
later with WorkerPool's deadline and failure reports (role `rollout`). trainer/async_rollout.py decides
what to submit when; this module only numbers the calls so each worker runs them in submission order
(distributed/rollout_worker.py)."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from hybridrl.batch import PromptBatch, Rollout, concat_rollouts, select
from hybridrl.batching import shard_rows
from hybridrl.config.async_checks import batches_per_sync
from hybridrl.config.schema import RLConfig
from hybridrl.rollout.base import SamplingParams


def rollout_pool_worker(cfg: RLConfig) -> tuple[type, int]:
    """The rollout pool's worker class and Ray max_concurrency: every call queued at once (each waits for its
    ticket on a thread; at most a sync window of generations and its pushes), plus one for `stacks`."""
    from hybridrl.distributed.rollout_worker import RolloutWorker

    return RolloutWorker, 2 * batches_per_sync(cfg.async_training) + 3


class RolloutGroup:
    def __init__(self, pool, pad_id: int):
        self.pool, self.pad_id = pool, pad_id
        self._tickets = 0  # calls submitted to every worker so far: the next call's turn on each of them

    def _ticket(self) -> int:
        self._tickets += 1
        return self._tickets - 1

    def push_weights(self, weights_ref, version: int) -> list:
        """Every worker loads the weights (an object-store reference: each worker reads it directly) after the
        calls submitted before; their refs, to wait on with `wait_pushes`."""
        ticket = self._ticket()
        return [a.load_weights.remote(ticket, weights_ref, version) for a in self.pool.actors]

    def submit(self, prompts: PromptBatch, n: int, sampling: SamplingParams, call: int,
               sample_ids: Optional[Tensor] = None) -> list:
        """Generation of `prompts` as train call `call`, its rows split over the workers like data-parallel
        ranks (keyed sampling: the same responses as one process); the refs, for `gather`. `sample_ids` ([N*n]):
        the responses' identities when the caller fixes them (rollout/base.generate_rollout); each shard its rows'."""
        ticket = self._ticket()
        shards = shard_rows(len(prompts.index), self.pool.world)
        ids = None if sample_ids is None else sample_ids.view(len(prompts.index), n)
        return [a.generate.remote(ticket, select(prompts, rows) if len(rows) else None, n, sampling, call,
                                  None if ids is None or not len(rows) else ids[rows].reshape(-1))
                for a, rows in zip(self.pool.actors, shards)]

    def wait_pushes(self, refs: list) -> None:
        self.pool.wait("rollout", "load_weights", refs)

    def gather(self, refs: list) -> Rollout:
        """The submitted generation's rollout, within trainer.worker_timeout_s from now (a dead or hung worker
        stops the run naming the rollout pool's rank)."""
        parts = [p for p in self.pool.call("rollout", "generate", refs) if p is not None]
        return concat_rollouts(parts, self.pad_id)
