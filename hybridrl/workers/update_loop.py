"""The mini-batch loop the actor and the critic share: epochs x shuffled mini-batches, one
optimizer step each, gradients clipped by global norm."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Generic, Iterable, TypeVar

import torch
from torch import Tensor

from hybridrl import progress
from hybridrl.batch import Sequences, num_rows, select, split, to_device
from hybridrl.batching import groups_of, micro_batch_rows
from hybridrl.config.levers import MicroBatching
from hybridrl.distributed.dp import DataParallel
from hybridrl.distributed.sharding import Sharding
from hybridrl.models.forward import device_of, distinct_prompts
from hybridrl.models.lora import is_lora, load_adapter_weights

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


def seqs_of(batch) -> Sequences:
    """The token ids of a batch (a Sequences, or a training batch holding one in `seqs`)."""
    return batch if isinstance(batch, Sequences) else batch.seqs


def micro_batch_rows_of(seqs: Sequences, batching: MicroBatching, keep_groups: bool, min_count: int = 1) -> list[Tensor]:
    """Each micro-batch's rows of `seqs` (batching.py): fixed size, or by token budget with the rows of one
    prompt kept together when `keep_groups` (prompt sharing then runs each prompt once)."""
    lengths = seqs.attention_mask.sum(-1).tolist()  # real tokens of each row, prompt + response
    groups = None
    if keep_groups and batching.dynamic:
        P = seqs.input_ids.shape[1] - seqs.response_mask.shape[1]
        groups = groups_of(distinct_prompts(seqs.input_ids[:, :P], seqs.attention_mask[:, :P])[1].tolist())
    return micro_batch_rows(lengths, batching, groups, min_count)


def clip_and_step(params: Iterable[torch.nn.Parameter], optimizer: torch.optim.Optimizer, grad_clip: float) -> float:
    """Clip the global gradient norm and step; a non-finite norm skips the step (the batch is lost, not the run)."""
    grad_norm = torch.nn.utils.clip_grad_norm_([p for p in params if p.requires_grad], grad_clip)
    if hasattr(grad_norm, "full_tensor"):  # sharded gradients (FSDP2): the norm is a DTensor over every rank's shard
        grad_norm = grad_norm.full_tensor()
    if torch.isfinite(grad_norm):
        optimizer.step()
    return float(grad_norm)


class UpdatingWorker(Generic[B]):
    """A role that trains: `settings` has mini_batch_size, ppo_epochs, shuffle; subclasses define
    `_optimizer_step(mini_batch) -> metrics`."""

    module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    shuffle_generator: torch.Generator
    sharding: Sharding  # how the data-parallel ranks hold the weights (distributed/sharding.py)
    model_key: str  # the role's model section in the config (its lora_rank), named in errors

    def _optimizer_step(self, mini: B) -> dict[str, float]:
        raise NotImplementedError

    @property
    def dp(self) -> DataParallel:
        return self.sharding.dp

    @property
    def device(self) -> torch.device:
        """Where the module lives; batches arrive on the CPU and are moved here."""
        return device_of(self.module)

    def _micro_batches(self, batch: B, batching: MicroBatching, keep_groups: bool) -> list[B]:
        """A mini-batch's micro-batches for forward + backward. With a token budget the count can differ
        by rank; a sharded (fsdp2) module all-gathers in every forward, so there every rank runs the
        largest count."""
        if not batching.dynamic:
            return split(batch, batching.size)
        seqs = seqs_of(batch)
        rows = micro_batch_rows_of(seqs, batching, keep_groups)
        if self.sharding.lockstep_forwards:
            rows = micro_batch_rows_of(seqs, batching, keep_groups, self.dp.max_over_ranks(len(rows)))
        return [select(batch, r) for r in rows]

    def _backward_all(self, micros: list[B], micro_loss: Callable[[B], torch.Tensor]) -> None:
        """Backward every micro-batch's loss; gradients cross ranks once, after the last one."""
        for i, micro in enumerate(progress.counted(micros, "micro-batch")):
            self.sharding.set_gradient_sync(self.module, i == len(micros) - 1)
            micro_loss(micro).backward()
        self.sharding.finish_gradients(self.module)

    def update(self, batch: B) -> dict[str, float]:
        """ppo_epochs passes over the batch in mini-batches; one optimizer step per mini-batch, one
        scheduler step per call."""
        s = self.settings
        self.module.train()
        batch = to_device(batch, self.device)
        metrics = run_epochs(batch, s.mini_batch_size, s.ppo_epochs, s.shuffle, self.shuffle_generator,
                             self._optimizer_step)
        self.scheduler.step()
        return metrics

    def save_pretrained(self, folder: str) -> None:
        """The weights as a HuggingFace folder, written by rank 0 (every rank calls: gathering shards is a collective).
        A LoRA module (peft) writes its adapter folder: the adapters, and the modules it trains whole."""
        state = self.sharding.full_state_dict(self.module)
        if self.sharding.dp.rank == 0:
            self.module.save_pretrained(folder, state_dict=state)

    def load_pretrained(self, folder: str) -> None:
        """Weights from a save_pretrained folder (with LoRA its adapter folder), into the module the
        optimizer already holds."""
        from hybridrl.models.loading import load_weights_into

        if is_lora(self.module):
            load_adapter_weights(self.module, folder, self.model_key)
        else:
            load_weights_into(self.module, folder, self.sharding.load_full_state_dict)

    def state_dict(self) -> dict:
        """Everything but the weights (those go to a HuggingFace folder) that resuming needs."""
        return {"optimizer": self.sharding.optimizer_state(self.module, self.optimizer),
                "scheduler": self.scheduler.state_dict(), "shuffle_generator": self.shuffle_generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.sharding.load_optimizer_state(self.module, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.shuffle_generator.set_state(state["shuffle_generator"])
