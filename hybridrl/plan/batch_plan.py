"""The batch plan: verl's batch-size keys turned into per-worker sizes, in one pure function.

Units (verl's): `data.train_batch_size` and `actor.ppo_mini_batch_size` count prompts;
each prompt yields `rollout.n` responses; `*_micro_batch_size_per_gpu` counts responses
on one worker. Every inconsistency is a `ConfigError` naming the keys and proposing
values that work.

A micro-batch size left null is derived (verl requires it, or dynamic batch sizes; we derive
it instead, so a small batch never meets a default that does not divide it): the update's is
the largest divisor of a worker's mini-batch share up to MICRO_CAP (plan/derive.py may
lower it further to fit the memory estimate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

MICRO_CAP = 128  # most responses per update micro-batch when the size is derived (verl's examples use 4-64 per GPU)

from hybridrl.batching import largest_divisor  # noqa: F401  re-exported
from hybridrl.errors import ConfigError


@dataclass(frozen=True)
class BatchPlan:
    world_size: int  # data-parallel workers (n_gpus_per_node * nnodes)
    prompts_per_step: int  # data.train_batch_size
    n: int  # responses per prompt
    responses_per_step: int  # prompts_per_step * n
    mini_batch_responses: int  # responses per optimizer step, all workers together
    mini_batches_per_epoch: int  # optimizer steps per ppo epoch
    ppo_epochs: int
    mini_batch_responses_per_worker: int
    micro_batch_responses_per_worker: int
    grad_accum_steps: int  # micro-batches per optimizer step on one worker
    derived: tuple[str, ...] = ()  # `key=value (why)` of each key derived: a micro-batch size left null, an auto dtype

    @property
    def optimizer_steps_per_step(self) -> int:
        return self.mini_batches_per_epoch * self.ppo_epochs

    @property
    def on_policy(self) -> bool:
        """One optimizer step per batch: the update's own first forward gives π_old exactly."""
        return self.optimizer_steps_per_step == 1

    def describe(self) -> str:
        return "\n".join([
            "batch plan:",
            f"  {self.prompts_per_step} prompts x {self.n} samples = {self.responses_per_step} responses per step",
            f"  {self.mini_batches_per_epoch} mini-batch(es) of {self.mini_batch_responses} responses x "
            f"{self.ppo_epochs} epoch(s) = {self.optimizer_steps_per_step} optimizer step(s) per step",
            f"  per worker ({self.world_size}): {self.mini_batch_responses_per_worker} responses per mini-batch = "
            f"{self.grad_accum_steps} micro-batch(es) of {self.micro_batch_responses_per_worker}",
            "  old log-probs: " + ("taken from the update's first forward (on-policy)" if self.on_policy
                                   else "recomputed before the update"),
            *(["  derived (keys left null or auto):"] + [f"    {note}" for note in self.derived] if self.derived else []),
        ])


def make_batch_plan(
    train_batch_size: int,
    n: int,
    ppo_mini_batch_size: int,
    ppo_micro_batch_size_per_gpu: Optional[int],
    ppo_epochs: int = 1,
    world_size: int = 1,
    role: str = "actor_rollout_ref.actor",
    world_key: str = "trainer.n_gpus_per_node * trainer.nnodes",
    micro_cap: int = MICRO_CAP,
) -> BatchPlan:
    """Normalize verl batch sizes (see module doc); raise ConfigError on any inconsistency.

    `role` is the config section whose ppo_* keys are checked (the actor's, or `critic`);
    `world_key` names the setting that gives `world_size` (the critic's own pool: critic.n_workers).
    `ppo_micro_batch_size_per_gpu=None` derives it: the largest divisor of a worker's mini-batch share
    up to `micro_cap` (noted in `derived`)."""
    micro_key = f"{role}.ppo_micro_batch_size_per_gpu"
    for key, value in [
        ("data.train_batch_size", train_batch_size),
        ("actor_rollout_ref.rollout.n", n),
        (f"{role}.ppo_mini_batch_size", ppo_mini_batch_size),
        (micro_key, 1 if ppo_micro_batch_size_per_gpu is None else ppo_micro_batch_size_per_gpu),
        (f"{role}.ppo_epochs", ppo_epochs),
        (world_key, world_size),
    ]:
        if value < 1:
            raise ConfigError(f"{key}={value} must be at least 1")
    if ppo_mini_batch_size > train_batch_size:
        raise ConfigError(
            f"{role}.ppo_mini_batch_size={ppo_mini_batch_size} is larger than "
            f"data.train_batch_size={train_batch_size} (both count prompts); set it to at most {train_batch_size}, "
            f"e.g. one of {_divisors_near(train_batch_size, ppo_mini_batch_size)}"
        )
    if train_batch_size % ppo_mini_batch_size:
        raise ConfigError(
            f"{role}.ppo_mini_batch_size={ppo_mini_batch_size} does not divide "
            f"data.train_batch_size={train_batch_size}; use one of {_divisors_near(train_batch_size, ppo_mini_batch_size)}"
        )
    mini_responses = ppo_mini_batch_size * n
    if mini_responses % world_size:
        raise ConfigError(
            f"a mini-batch holds ppo_mini_batch_size * rollout.n = {ppo_mini_batch_size} * {n} = {mini_responses} "
            f"responses, which do not split evenly over {world_size} workers; change "
            f"{role}.ppo_mini_batch_size or {world_key} so that {world_size} divides it"
        )
    per_worker = mini_responses // world_size
    derived = ()
    if ppo_micro_batch_size_per_gpu is None:
        ppo_micro_batch_size_per_gpu = largest_divisor(per_worker, micro_cap)
        derived = (f"{micro_key}={ppo_micro_batch_size_per_gpu} (the largest divisor of a worker's {per_worker} "
                   f"mini-batch responses up to {micro_cap})",)
    if ppo_micro_batch_size_per_gpu > per_worker or per_worker % ppo_micro_batch_size_per_gpu:
        raise ConfigError(
            f"{role}.ppo_micro_batch_size_per_gpu={ppo_micro_batch_size_per_gpu} must divide the "
            f"{per_worker} responses of a mini-batch on one worker (ppo_mini_batch_size * rollout.n / workers = "
            f"{ppo_mini_batch_size} * {n} / {world_size}); use one of {_divisors_near(per_worker, ppo_micro_batch_size_per_gpu)}"
        )
    return BatchPlan(
        world_size=world_size,
        prompts_per_step=train_batch_size,
        n=n,
        responses_per_step=train_batch_size * n,
        mini_batch_responses=mini_responses,
        mini_batches_per_epoch=train_batch_size // ppo_mini_batch_size,
        ppo_epochs=ppo_epochs,
        mini_batch_responses_per_worker=per_worker,
        micro_batch_responses_per_worker=ppo_micro_batch_size_per_gpu,
        grad_accum_steps=per_worker // ppo_micro_batch_size_per_gpu,
        derived=derived,
    )


def total_training_steps(num_prompts: int, train_batch_size: int, total_epochs: int, override: int | None) -> int:
    """Steps of the run: `trainer.total_training_steps` if set, else full batches x epochs (verl drops the last)."""
    steps_per_epoch = num_prompts // train_batch_size
    if steps_per_epoch == 0:
        raise ConfigError(
            f"the training set has {num_prompts} prompts, fewer than data.train_batch_size={train_batch_size}; "
            f"lower data.train_batch_size to at most {num_prompts} or add prompts"
        )
    if total_epochs < 1:
        raise ConfigError(f"trainer.total_epochs={total_epochs} must be at least 1")
    if override is not None and override < 1:
        raise ConfigError(f"trainer.total_training_steps={override} must be at least 1 (or null)")
    return override if override is not None else steps_per_epoch * total_epochs


def _divisors_near(total: int, wanted: int, count: int = 4) -> str:
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    best = sorted(sorted(divisors, key=lambda d: (abs(d - wanted), d))[:count])
    return ", ".join(str(d) for d in best)
