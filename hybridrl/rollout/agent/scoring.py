"""The rewards of a step's agent rows (the rule is rows.py's): a number an agent returned is its row's score as
is; the rows whose agents returned fields are scored by the run's reward manager on their final assistant text; a
row that carries no training signal (its agent failed, timed out or made no call) scores 0."""

from __future__ import annotations

import torch

from hybridrl.batch import Rollout, select
from hybridrl.rewards.manager import RewardManager, RewardOutput
from hybridrl.rollout.agent.rows import AgentOutcome


def agent_rewards(manager: RewardManager, rollout: Rollout, outcomes: list[AgentOutcome],
                  texts: list[str]) -> RewardOutput:
    """[N] scores and rewards of the agent rows (`texts`: each row's final assistant text, rows.final_texts). A
    reward function's extras are 0 on the rows it did not score; `details` say how each row was rewarded."""
    n = len(outcomes)
    scores, rewards, penalty = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    errors = torch.zeros(n, dtype=torch.bool)
    details: list[dict] = [{"agent": o.status, **({"agent_error": o.error} if o.error else {})} for o in outcomes]
    for i, o in enumerate(outcomes):
        if o.trains and o.reward is not None:
            scores[i] = rewards[i] = o.reward
            details[i]["reward_from"] = "agent"
    scored = [i for i, o in enumerate(outcomes) if o.trains and o.reward is None]
    extras: dict[str, torch.Tensor] = {}
    if scored:
        idx = torch.tensor(scored)
        out = manager.score(select(rollout, idx), [texts[i] for i in scored])
        scores[idx], rewards[idx], penalty[idx], errors[idx] = out.scores, out.rewards, out.overlong_penalty, out.errors
        for key, values in out.extras.items():
            extras[key] = torch.zeros(n, dtype=values.dtype)
            extras[key][idx] = values
        for i, d in zip(scored, out.details):
            details[i].update(d, reward_from="reward function")
    return RewardOutput(scores=scores, rewards=rewards, overlong_penalty=penalty, errors=errors, extras=extras,
                        details=details)
