"""Which rollout source a run gets (trainer/sources.py, agent_source.py, agent_async.py): a module of its own, so that
the sources import their shared pieces from sources.py and nothing imports back."""

from __future__ import annotations

from typing import Callable, Optional

from hybridrl.trainer.agent_async import AsyncAgentSource
from hybridrl.trainer.agent_source import AgentSettings, AgentSource
from hybridrl.trainer.async_rollout import AsyncRollouts
from hybridrl.trainer.collect import GroupFilter, RolloutInputs
from hybridrl.trainer.sources import AsyncSource, RolloutSource, SyncSource


def rollout_source(cfg, inputs: RolloutInputs, n: int, num_groups: int, group_filter: Optional[GroupFilter],
                   total_steps: int, pool, agent: Optional[Callable] = None) -> RolloutSource:
    """The run's source: the agents' when there is an agent function (`agent`: hybridrl.train's agent= or
    rollout.agent.path's; config/agent_checks.py refuses it with a group filter), asynchronous when cfg has a
    rollout pool (`pool`: RayRoles.rollout), else synchronous."""
    if agent is not None:
        agents = AsyncAgentSource.of_config(cfg, inputs, agent, n, total_steps, pool)
        return agents or AgentSource(inputs, agent, AgentSettings.of_config(cfg), n, num_groups)
    rollouts = AsyncRollouts.of_config(cfg, inputs, n, total_steps, pool)
    if rollouts is None:
        return SyncSource(inputs, n, num_groups, group_filter)
    return AsyncSource(inputs, rollouts, num_groups)
