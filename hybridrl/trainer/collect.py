"""A step's training rollout: sample prompts, generate, score; with DAPO dynamic sampling,
keep generating until enough groups have responses that differ in reward."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from hybridrl.algos.group_filter import groups_with_spread
from hybridrl.batch import PromptBatch, Rollout, concat, concat_rollouts, select
from hybridrl.data.dataset import RLDataset
from hybridrl.data.sampler import PromptSampler
from hybridrl.errors import HybridRLError
from hybridrl.rewards.manager import RewardManager, RewardOutput
from hybridrl.rollout.base import SamplingParams
from hybridrl.trainer.metrics import timed
from hybridrl.workers.roles import PolicyRole

Generate = Callable[[PromptBatch], Rollout]  # a batch's prompts -> their n responses each (with log-probs)


@dataclass(frozen=True)
class GroupFilter:
    metric: str  # schema.FILTER_METRICS: score = the scorer's value, acc = its "acc" extra if any (else score),
    # seq_reward = after shaping
    max_num_gen_batches: int  # 0: no limit


@dataclass(frozen=True)
class RolloutInputs:
    """What a rollout source draws on (trainer/sources.py): the training prompts in the sampler's order, the
    policy that samples them, the scorer."""

    train_data: RLDataset
    sampler: PromptSampler  # the run's own (checkpointed): it moves only as batches are taken
    pad_id: int
    policy: PolicyRole
    sampling: SamplingParams  # the training rollouts'
    reward: RewardManager


def _generate_and_score(run: RolloutInputs, generate: Generate,
                        metrics: dict[str, float]) -> tuple[Rollout, RewardOutput]:
    prompts = run.train_data.collate(run.sampler.next_batch(), run.pad_id)
    with timed(metrics, "gen"):  # sample n responses per prompt, keeping their log-probs (async: generated ahead)
        rollout = generate(prompts)
    with timed(metrics, "reward"):  # decode, score, shape
        reward = run.reward.score(rollout)
    return rollout, reward


def collect_rollout(run: RolloutInputs, n: int, num_groups: int, group_filter: Optional[GroupFilter],
                    metrics: dict[str, float], generate: Optional[Generate] = None) -> tuple[Rollout, RewardOutput]:
    """`num_groups` groups of n responses (rows i*n .. i*n+n-1 share a uid) and their rewards. `generate`: how the
    responses are made (a source's own: the async pool's batch); None: the policy samples them now."""
    if generate is None:
        generate = lambda prompts: run.policy.generate(prompts, n, run.sampling)  # noqa: E731
    if group_filter is None:
        return _generate_and_score(run, generate, metrics)
    rollouts, rewards, kept, rounds, seen = [], [], 0, 0, 0
    while kept < num_groups:
        if group_filter.max_num_gen_batches > 0 and rounds == group_filter.max_num_gen_batches:
            raise HybridRLError(
                f"algorithm.filter_groups: after {rounds} generation rounds only {kept} of the "
                f"data.train_batch_size={num_groups} groups had responses that differ in {group_filter.metric}; "
                "the prompts are too easy or too hard for the model. Raise algorithm.filter_groups.max_num_gen_batches "
                "(0: no limit), or set algorithm.filter_groups.enable=false")
        rollout, reward = _generate_and_score(run, generate, metrics)
        rounds, seen = rounds + 1, seen + len(rollout.uid) // n
        metric = {"seq_reward": reward.rewards, "acc": reward.extras.get("acc", reward.scores)}.get(
            group_filter.metric, reward.scores)
        rows = groups_with_spread(metric, rollout.uid).nonzero().squeeze(-1)
        rollouts.append(select(rollout, rows))
        rewards.append(select(reward, rows))
        kept += len(rows) // n
    rows = torch.arange(num_groups * n)  # whole groups are contiguous: the first num_groups of them
    metrics["train/num_gen_batches"] = float(rounds)
    metrics["train/kept_group_ratio"] = kept / seen  # informative groups per generated group
    return select(concat_rollouts(rollouts, run.pad_id), rows), select(concat(rewards), rows)


def greedy_baseline(engine_owner, reward: RewardManager, rollout: Rollout, n: int, sampling) -> Tensor:
    """ReMax's baseline: the reward of one greedy response per prompt, repeated for its n samples; [N]."""
    firsts = torch.arange(0, len(rollout.uid), n)
    greedy = engine_owner.generate(select(rollout.prompts, firsts), 1, dataclasses.replace(sampling, do_sample=False))
    return reward.score(greedy).rewards.repeat_interleave(n)
