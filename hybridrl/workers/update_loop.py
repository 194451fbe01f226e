"""The mini-batch loop the actor and the critic share: epochs x shuffled mini-batches, one
optimizer step each, gradients clipped by global norm."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Generic, Iterable, TypeVar

import torch

from hybridrl.batch import num_rows, select, split

B = TypeVar("B")


def run_epochs(batch: B, mini_batch_size: int, epochs: int, shuffle: bool, generator: torch.Generator,
               optimizer_step: Callable[[B], dict[str, float]]) -> dict[str, float]:
    """Call `optimizer_step` on each mini-batch of each epoch; metrics averaged over steps (`*_max`: max)."""
    per_step: dict[str, list[float]] = defaultdict(list)
    for _ in range(epochs):
        rows = torch.arange(num_rows(batch))
        if shuffle:
            rows = torch.randperm(len(rows), generator=generator)
        for mini in split(select(batch, rows), mini_batch_size):
            for key, value in optimizer_step(mini).items():
                per_step[key].append(value)
    return {k: (max(v) if k.endswith("_max") else sum(v) / len(v)) for k, v in per_step.items()}


def clip_and_step(params: Iterable[torch.nn.Parameter], optimizer: torch.optim.Optimizer, grad_clip: float) -> float:
    """Clip the global gradient norm and step; a non-finite norm skips the step (the batch is lost, not the run)."""
    grad_norm = torch.nn.utils.clip_grad_norm_([p for p in params if p.requires_grad], grad_clip)
    if torch.isfinite(grad_norm):
        optimizer.step()
    return float(grad_norm)


class UpdatingWorker(Generic[B]):
    """A role that trains: `settings` has mini_batch_size, ppo_epochs, shuffle; subclasses define
    `_optimizer_step(mini_batch) -> metrics`."""

    module: torch.nn.Module
    scheduler: torch.optim.lr_scheduler.LRScheduler
    shuffle_generator: torch.Generator

    def _optimizer_step(self, mini: B) -> dict[str, float]:
        raise NotImplementedError

    def update(self, batch: B) -> dict[str, float]:
        """ppo_epochs passes over the batch in mini-batches; one optimizer step per mini-batch, one
        scheduler step per call."""
        s = self.settings  # type: ignore[attr-defined]
        self.module.train()
        metrics = run_epochs(batch, s.mini_batch_size, s.ppo_epochs, s.shuffle, self.shuffle_generator,
                             self._optimizer_step)
        self.scheduler.step()
        return metrics

    def save_pretrained(self, folder: str) -> None:
        """The weights as a HuggingFace folder."""
        self.module.save_pretrained(folder)

    def load_pretrained(self, folder: str) -> None:
        """Weights from a save_pretrained folder, into the module the optimizer already holds."""
        from hybridrl.models.loading import load_weights_into

        load_weights_into(self.module, folder)

    def state_dict(self) -> dict:
        """Everything but the weights (those go to a HuggingFace folder) that resuming needs."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),  # type: ignore[attr-defined]
                "shuffle_generator": self.shuffle_generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[attr-defined]
        self.scheduler.load_state_dict(state["scheduler"])
        self.shuffle_generator.set_state(state["shuffle_generator"])
