"""Seeded epoch sampler over prompt indices; its state is two integers, so resuming is exact."""

from __future__ import annotations

import torch


class PromptSampler:
    """Full batches of indices; each epoch is a fresh permutation seeded by (seed, epoch).

    The last incomplete batch of an epoch is dropped (verl's `drop_last=True`).
    """

    def __init__(self, size: int, batch_size: int, seed: int, shuffle: bool = True):
        self.size, self.batch_size, self.seed, self.shuffle = size, batch_size, seed, shuffle
        self.epoch, self.position = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.size, generator=gen).tolist()

    def next_batch(self) -> list[int]:
        if self.position + self.batch_size > self.size:
            self.epoch, self.position = self.epoch + 1, 0
            self._order = self._permutation(self.epoch)
        batch = self._order[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._permutation(self.epoch)
