"""Where the driver loop's batches come from (DESIGN.md, "Rollout sources"): one interface, one implementation per
schedule, so that trainer/rl.py never asks which one it runs.

- SyncSource: the batch is generated on demand by the policy and scored (DAPO: until enough groups are
  informative); staleness 0, every batch on-policy.
- AsyncSource: the batch is taken from the rollout pool's queue (trainer/async_rollout.py), generated ahead of the
  trainer within the staleness bound, and scored; its lag says how π_old is obtained (trainer/old_policy.py);
  the pool gets the trainer's weights at the start and every trigger_parameter_sync_step steps.

- AgentSource (trainer/agent_source.py): the user's agents make the batch through the OpenAI-compatible proxy
  (rollout/agent/); staleness 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from hybridrl.batch import PromptBatch, Rollout
from hybridrl.rewards.manager import RewardOutput
from hybridrl.trainer.async_rollout import AsyncRollouts
from hybridrl.trainer.collect import GroupFilter, RolloutInputs, collect_rollout
from hybridrl.trainer.metrics import timed


@dataclass
class SourceBatch:
    """A step's scored batch and how far behind the trainer's weights it was generated."""

    rollout: Rollout  # [N] rows: groups of n responses, rows i*n .. i*n+n-1 share a uid
    reward: RewardOutput  # [N] their scores and rewards
    lag: int = 0  # optimizer steps between the weights that generated it (its oldest token) and the trainer's
    behaviour: Optional[str] = None  # None: on-policy (lag 0); "rollout" | "prox": π_old for an older batch
    # (its log-probs, or recomputed: async_training.compute_prox_log_prob; trainer/old_policy.py)


class RolloutSource(Protocol):
    """The loop calls start once, then per step next_batch and (after the update) after_update; close at the end,
    also when a step failed. Metrics go into `m`, the step's dict (timing_s/gen, async/* ...)."""

    def start(self, first_step: int) -> None:
        """Before the first step trained (`first_step`: 1, or the resumed checkpoint's step + 1)."""
        ...

    def next_batch(self, step: int, m: dict[str, float]) -> SourceBatch:
        """Step `step`'s batch, with its prompts the run's sampler's next ones."""
        ...

    def after_update(self, step: int, m: dict[str, float]) -> None:
        """After step `step`'s update: the new weights where the source generates with its own copy."""
        ...

    def close(self) -> None:
        """What the source holds (not the worker processes: RLRun.close ends those after it)."""
        ...


class SyncSource:
    """Generates each batch when asked, with the policy's current weights."""

    def __init__(self, inputs: RolloutInputs, n: int, num_groups: int, group_filter: Optional[GroupFilter]):
        self.inputs, self.n, self.num_groups, self.group_filter = inputs, n, num_groups, group_filter

    def start(self, first_step: int) -> None:
        pass  # nothing is generated ahead

    def next_batch(self, step: int, m: dict[str, float]) -> SourceBatch:
        rollout, reward = collect_rollout(self.inputs, self.n, self.num_groups, self.group_filter, m)
        return SourceBatch(rollout, reward)

    def after_update(self, step: int, m: dict[str, float]) -> None:
        pass  # the policy's update already loaded its weights into its own engine (workers/policy.py)

    def close(self) -> None:
        pass


class AsyncSource:
    """Takes each batch from the rollout pool's queue (`rollouts`); the weights reach the pool through it."""

    def __init__(self, inputs: RolloutInputs, rollouts: AsyncRollouts, num_groups: int):
        self.inputs, self.rollouts, self.num_groups = inputs, rollouts, num_groups

    def start(self, first_step: int) -> None:
        self.rollouts.start(first_step)  # the pool starts from the trainer's weights, generating ahead

    def next_batch(self, step: int, m: dict[str, float]) -> SourceBatch:
        def take(prompts: PromptBatch) -> Rollout:  # waits for the batch generated for these prompts
            return self.rollouts.take(prompts, m)

        # no group filter: the config refuses one with a rollout pool (config/async_checks.py)
        rollout, reward = collect_rollout(self.inputs, self.rollouts.n, self.num_groups, None, m, generate=take)
        return SourceBatch(rollout, reward, self.rollouts.lag, self.rollouts.behaviour)

    def after_update(self, step: int, m: dict[str, float]) -> None:
        with timed(m, "sync_rollout_weights"):  # every trigger_parameter_sync_step steps, the weights to the pool
            self.rollouts.after_update(step)

    def close(self) -> None:
        self.rollouts.close()


def rollout_source(cfg, inputs: RolloutInputs, n: int, num_groups: int, group_filter: Optional[GroupFilter],
                   total_steps: int, pool, agent: Optional[Callable] = None) -> RolloutSource:
    """The run's source: the agents' when there is an agent function (`agent`: hybridrl.train's agent= or
    rollout.agent.path's; config/agent_checks.py refuses it with a pool or a group filter), asynchronous when cfg
    has a rollout pool (`pool`: RayRoles.rollout), else synchronous."""
    if agent is not None:
        from hybridrl.trainer.agent_source import AgentSettings, AgentSource  # it imports this module

        return AgentSource(inputs, agent, AgentSettings.of_config(cfg), n, num_groups)
    rollouts = AsyncRollouts.of_config(cfg, inputs, n, total_steps, pool)
    if rollouts is None:
        return SyncSource(inputs, n, num_groups, group_filter)
    return AsyncSource(inputs, rollouts, num_groups)
