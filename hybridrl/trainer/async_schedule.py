"""Asynchronous training's one schedule (DESIGN.md, "Rollout sources"): when the rollout pool may start a step's batch,
when the trainer pushes its weights to the pool, and how far behind the trainer a batch is. Both asynchronous
sources follow it: token batches (trainer/async_rollout.py) and agents' batches (trainer/agent_async.py); they only
do the pool calls it decides.

Versions count optimizer steps: the weights after step j are version j. The trainer's weights (fresh or restored)
are pushed at the start, as version first_step - 1, and then after every `sync_every`-th step
(async_training.trigger_parameter_sync_step) while a later batch can still use them.

The staleness bound (verl's fully-async, at batch granularity): the batch of step k may start once a version
>= k - `ahead` was pushed, ahead = B = floor((1 + staleness_threshold) x sync_every) (config/async_checks.py
batches_per_sync). Staleness 0 with sync_every 1 (B = 1) is the synchronous run: batch k starts from the weights
of step k - 1.

A push is useful only to a later batch (step > the step just trained) that can still take it: one not started yet
(it starts from these weights or newer), or, where a batch is several pool calls submitted over time (an agents'
step: one engine call per barrier round), one already started, whose later calls get the newer weights. A token
batch is one pool call per step, fixed at submission (the pool runs calls in submission order), so once the last
batch is submitted a push reaches nothing and is not made. That is `reaches_started`.

A batch's lag is the trainer's version at its update (step - 1) minus the oldest version that generated any part
of it (a call, a turn, a token); lag > 0 makes it off-policy, and π_old is then the rollout's log-probs or
recomputed on the trainer (`prox`: compute_prox_log_prob; trainer/old_policy.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hybridrl.config.async_checks import batches_per_sync


@dataclass
class AsyncSchedule:
    """The push and staleness decisions of one asynchronous run; the source that owns it calls `start`, then
    `started` per batch it starts and `pushed` per push it makes."""

    total_steps: int  # the run's last step: no batch past it is started
    sync_every: int  # async_training.trigger_parameter_sync_step: push after every N-th step
    ahead: int  # B, batches_per_sync: step k may start once version k - B was pushed
    prox: bool  # async_training.compute_prox_log_prob: π_old of a lagged batch is recomputed ("prox")
    reaches_started: bool = False  # a push reaches a batch already started (its later calls): agents' batches
    version: int = -1  # the newest version pushed (-1: none yet)
    next_step: int = 1  # the first step whose batch has not started

    @classmethod
    def of_config(cls, a, total_steps: int, reaches_started: bool = False) -> "AsyncSchedule":
        """From cfg.async_training (config/schema_async.py)."""
        return cls(total_steps=total_steps, sync_every=a.trigger_parameter_sync_step, ahead=batches_per_sync(a),
                   prox=a.compute_prox_log_prob, reaches_started=reaches_started)

    def start(self, first_step: int) -> int:
        """Before `first_step` (1, or a checkpoint's step + 1) trains: the version to push first, the trainer's own
        weights; nothing generated before survives (a resume regenerates the batches that were in flight)."""
        self.next_step = first_step
        return first_step - 1

    def pushed(self, version: int) -> None:
        self.version = version

    def may_start(self, step: int) -> bool:
        """May the batch of `step` be generated now: within the run, and a version >= step - B pushed (the bound)."""
        return step <= self.total_steps and self.version >= step - self.ahead

    def started(self, step: int) -> None:
        """The batch of `step` was started (its prompts taken, its first pool call submitted)."""
        self.next_step = step + 1

    def push_due(self, step: int) -> bool:
        """After step `step`'s update: push its weights (version `step`)? Every sync_every-th step, while a later
        batch can still use them: one not started yet, or (reaches_started) any later step's."""
        if step % self.sync_every != 0:
            return False
        return self.next_step <= self.total_steps or (self.reaches_started and step < self.total_steps)

    def lag(self, step: int, versions: list[int]) -> int:
        """Optimizer steps the batch of `step` is behind the trainer at its update: (step - 1) minus the oldest of
        the `versions` that generated it; no versions (nothing was generated) is lag 0."""
        return step - 1 - min(versions) if versions else 0

    def behaviour(self, lag: int) -> Optional[str]:
        """How π_old is obtained for a batch of this lag (SourceBatch.behaviour): None on-policy, else "prox"
        (recomputed) or "rollout" (the rollout's log-probs)."""
        if lag == 0:
            return None
        return "prox" if self.prox else "rollout"
