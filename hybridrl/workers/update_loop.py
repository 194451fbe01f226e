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
from hybridrl.plan.levers import MicroBatching
from hybridrl.models.forward import distinct_prompts
from hybridrl.models.precision import Precision
from hybridrl.models.lora import is_lora, load_adapter_weights
from hybridrl.parallel.dp import DataParallel
from hybridrl.parallel.sharding import Sharding

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
    sharding: Sharding  # how the data-parallel ranks hold the weights (parallel/sharding.py)
    model_key: str  # the role's model section in the config (its lora_rank), named in errors

    def _optimizer_step(self, mini: B) -> dict[str, float]:
        raise NotImplementedError

    @property
    def dp(self) -> DataParallel:
        return self.sharding.dp

    @property
    def device(self) -> torch.device:
        """Where the forwards run (with the module, or the GPU of host-offloaded FSDP2 shards); batches
        arrive on the CPU and are moved here."""
        return self.sharding.compute_device(self.module)

    @property
    def precision(self) -> Precision:
        """The compute dtype the role's forwards run in (its sharding's, models/precision.py)."""
        return self.sharding.precision

    def _micro_batches(self, batch: B, batching: MicroBatching, keep_groups: bool, filler: B | None = None) -> list[B]:
        """A mini-batch's micro-batches for forward + backward. With a token budget the count can differ
        by rank; a sharded (fsdp2) module all-gathers in every forward, so there every rank runs the
        largest count. `filler`: rows left out of `batch` because they add exactly nothing to the loss
        (zero advantage); a sharded rank that runs fewer micro-batches than the busiest one runs some of
        them, one per micro-batch, to keep in step."""
        if not batching.dynamic:
            micros = split(batch, batching.size)
        else:
            seqs, some = seqs_of(batch), num_rows(batch) > 0  # a rank's rows may all have been left out
            rows = micro_batch_rows_of(seqs, batching, keep_groups) if some else []
            if self.sharding.lockstep_forwards:  # a collective: every rank takes part, rows or not
                count = self.dp.max_over_ranks(len(rows))
                rows = micro_batch_rows_of(seqs, batching, keep_groups, count) if some else []
            micros = [select(batch, r) for r in rows]
        if filler is not None and self.sharding.lockstep_forwards:
            missing = self.dp.max_over_ranks(len(micros)) - len(micros)
            micros += [select(filler, torch.tensor([i])) for i in range(min(missing, num_rows(filler)))]
        return micros

    def _backward_all(self, micros: list[B], micro_loss: Callable[[B], torch.Tensor], fill_missing: bool = False) -> None:
        """Backward every micro-batch's loss; gradients cross ranks once, after the last one. `fill_missing`:
        rows were left out because their gradient is exactly 0, so a trainable parameter that got none (no
        micro-batch ran here) gets zeros: the optimizer then steps as it would have (AdamW's moments decay,
        weight decay applies), and every rank sums the same gradients."""
        for i, micro in enumerate(progress.counted(micros, "micro-batch")):
            self.sharding.set_gradient_sync(self.module, i == len(micros) - 1)
            micro_loss(micro).backward()
        if fill_missing:
            for p in self.module.parameters():
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
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

    def saved_shapes(self) -> dict[str, tuple[int, ...]]:
        """{name: shape} of the tensors save_pretrained writes (a LoRA module: its adapter's), read from
        the module without gathering shards (a DTensor's shape is the global one); for resume checks."""
        if is_lora(self.module):
            from peft import get_peft_model_state_dict

            state = get_peft_model_state_dict(self.module)
        else:
            state = self.module.state_dict()
        return {name: tuple(t.shape) for name, t in state.items()}

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
        """Moments, step counts and the schedule's position from the checkpoint; the hyperparameters (lr,
        betas, weight decay, eps) stay the configured ones. torch would restore the saved ones, so a
        changed `optim.lr` resumed with trainer.resume_allow_config_change=true was silently ignored;
        unchanged, they are equal and the lr below is the float the schedule computed before."""
        configured = [{k: g[k] for k in ("betas", "weight_decay", "eps") if k in g} for g in self.optimizer.param_groups]
        base_lrs = list(self.scheduler.base_lrs)
        self.sharding.load_optimizer_state(self.module, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scheduler.base_lrs = base_lrs
        for group, hyper, base, factor in zip(self.optimizer.param_groups, configured, base_lrs,
                                              self.scheduler.lr_lambdas):
            group.update(hyper, initial_lr=base, lr=base * factor(self.scheduler.last_epoch))
        self.shuffle_generator.set_state(state["shuffle_generator"])
