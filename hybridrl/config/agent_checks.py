"""The rules that tie agent rollouts (actor_rollout_ref.rollout.agent.*, or hybridrl.train(agent=...)) to the rest of
the config. Agents run in synchronous training, on the local or the Ray backend, with the hf or the vLLM engine
(their completions go through the policy's generate, whichever engine and workers hold it); what they cannot do
yet is refused by name."""

from __future__ import annotations

from hybridrl.config.async_checks import async_enabled
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError, messages_of, raise_all

KEY = "actor_rollout_ref.rollout.agent"


def agent_conflicts(cfg: RLConfig, given: str) -> list[str]:
    """What the config asks for that agent rollouts cannot do yet; `given`: how the agent was named (the key, or
    hybridrl.train's agent=), for the messages."""
    rollout, errors = cfg.actor_rollout_ref.rollout, []
    later = "is not yet supported with the agent proxy"
    if rollout.multi_turn.enable:
        errors.append(f"{given} and actor_rollout_ref.rollout.multi_turn.enable=true both say how a rollout runs "
                      "(your agent, or the built-in tool loop); pick one: set "
                      "actor_rollout_ref.rollout.multi_turn.enable=false, or remove the agent")
    if async_enabled(cfg):
        errors.append(f"asynchronous training (rollout.n_gpus_per_node x rollout.nnodes > 0) {later}; use "
                      f"synchronous training (rollout.n_gpus_per_node=0, rollout.nnodes=0) with {given}")
    if cfg.algorithm.filter_groups.enable:
        errors.append(f"algorithm.filter_groups.enable=true (dynamic sampling: more generation rounds per step) {later}; "
                      f"set algorithm.filter_groups.enable=false with {given}")
    return errors


def check_agent(cfg: RLConfig) -> None:
    """With agent.path set: the function loads and is `async def agent(client, row)`, and nothing conflicts."""
    agent = cfg.actor_rollout_ref.rollout.agent
    if agent.path is None:
        return
    from hybridrl.rollout.agent.loading import load_agent

    errors = agent_conflicts(cfg, f"{KEY}.path")
    try:
        load_agent(agent.path, agent.name)  # a missing file or a wrong function fails now, not at the first step
    except ConfigError as e:
        errors = messages_of(e) + errors  # every problem at once
    raise_all(errors)
