"""Data parallelism inside a training role: each rank holds a full copy of the weights and a
shard of every mini-batch; what crosses ranks is named here and nowhere else.

Exactness: the loss of a mini-batch is normalised by the WHOLE mini-batch's token and sequence
counts (summed over ranks), each rank back-propagates its shard's share, and the gradients are
summed over ranks. Sum of the shards' shares = the full mini-batch's loss, so the summed gradient
is the single-process gradient (up to float summation order), the clipped norm is identical on
every rank, and every rank takes the same optimizer step: the replicas never drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Iterable, Optional

import torch
import torch.distributed as dist

from hybridrl.algos.reduce import LossScale


@dataclass(frozen=True)
class DataParallel:
    """The data-parallel group of a role; the default is one process (every reduction is the identity)."""

    rank: int = 0
    world_size: int = 1
    group: Optional[object] = None  # a torch.distributed process group; None: the default (world) group

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def loss_scale(self, mask: torch.Tensor, norm_length: float | None = None) -> LossScale:
        """LossScale of the whole mini-batch, from this rank's shard `mask` [b, T]."""
        local = LossScale.of(mask, norm_length)
        if not self.active:
            return local
        counts = torch.tensor([local.num_tokens, local.num_seqs], dtype=torch.float64)
        dist.all_reduce(counts, group=self.group)
        return LossScale(float(counts[0]), float(counts[1]), local.norm_length)

    def sum_gradients(self, params: Iterable[torch.nn.Parameter], reduce_dtype: torch.dtype | None = None) -> None:
        """Sum .grad over ranks, flattened into one buffer per dtype (one collective, not one per tensor).
        `reduce_dtype` (mixed_precision.reduce_dtype): the dtype the buffer crosses ranks in (bf16 halves
        the bytes; each gradient is then rounded to bf16 before the sum); None: the gradients' own."""
        if not self.active:
            return
        grads = [p.grad for p in params if p.grad is not None]
        for dtype in {g.dtype for g in grads}:
            same = [g for g in grads if g.dtype == dtype]
            flat = torch.cat([g.reshape(-1).to(reduce_dtype or dtype) for g in same])
            dist.all_reduce(flat, group=self.group)
            offset = 0
            for g in same:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

    def max_over_ranks(self, value: int) -> int:
        """The largest of every rank's `value` (e.g. micro-batches that every rank must run in lockstep)."""
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return int(t)

    def reduce_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Per-rank shares of mini-batch metrics -> the mini-batch's: summed, `*_max` keys maxed."""
        if not self.active:
            return stats
        keys = sorted(stats)
        sums = torch.tensor([0.0 if k.endswith("_max") else stats[k] for k in keys], dtype=torch.float64)
        maxes = torch.tensor([stats[k] if k.endswith("_max") else 0.0 for k in keys], dtype=torch.float64)
        dist.all_reduce(sums, group=self.group)
        dist.all_reduce(maxes, op=dist.ReduceOp.MAX, group=self.group)
        return {k: float(maxes[i] if k.endswith("_max") else sums[i]) for i, k in enumerate(keys)}


SINGLE = DataParallel()


def init_data_parallel(rank: int, world_size: int, address: str, port: int, timeout_s: float,
                       backend: str = "gloo") -> DataParallel:
    """Join the process group of `world_size` ranks (gloo on CPU, nccl on GPU); every collective
    then fails after `timeout_s` instead of waiting forever for a dead rank."""
    dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    return DataParallel(rank, world_size)


def ensure_process_group(dp: DataParallel, device_type: str) -> None:
    """A default process group for FSDP2's device mesh: the ranks' own (init_data_parallel), or for one
    process alone (fsdp2 with one worker, for its CPU offload) a one-rank group over an in-memory store."""
    if dist.is_initialized():
        return
    if dp.active:
        raise RuntimeError("a data-parallel group of several ranks must be joined first (init_data_parallel)")
    backend = "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
