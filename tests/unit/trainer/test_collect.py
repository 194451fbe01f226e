"""Rollout collection: dynamic sampling rounds, trimming, the round limit, and padding-aware concat."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hybridrl.batch import PromptBatch, Rollout, concat_rollouts
from hybridrl.errors import HybridRLError
from hybridrl.rewards.manager import RewardOutput
from hybridrl.trainer.collect import GroupFilter, collect_rollout

PAD = 0


def prompts(index: list[int], width: int) -> PromptBatch:
    ids = torch.full((len(index), width), 7)
    mask = torch.ones(len(index), width, dtype=torch.long)
    return PromptBatch(ids, mask, ["toy"] * len(index), [str(i) for i in index], index)


class FakeRun:
    """Prompt k's responses score `SCORES[k]`; each round's responses have a different width."""

    def __init__(self, scores: dict[int, list[float]], rounds: list[list[int]]):
        self.scores, self.rounds, self.pad_id = scores, iter(rounds), PAD
        self.sampler = SimpleNamespace(next_batch=lambda: next(self.rounds))
        self.train_data = SimpleNamespace(collate=lambda idx, pad: prompts(idx, 2 + len(idx)))
        self.policy = SimpleNamespace(generate=self.generate)
        self.reward = SimpleNamespace(score=self.score)
        self.sampling, self.rollouts = None, None  # synchronous: no async rollout queue

    def generate(self, p: PromptBatch, n: int, sampling) -> Rollout:
        rep = p.repeat_interleave(n)
        T = 1 + len(p.index)  # width differs per round, so concat must re-pad
        resp = torch.arange(len(rep.index))[:, None].repeat(1, T) + 100
        return Rollout(rep, resp, torch.ones(len(rep.index), T, dtype=torch.long), torch.zeros(len(rep.index), T),
                       torch.arange(len(p.index)).repeat_interleave(n))

    def score(self, rollout: Rollout) -> RewardOutput:
        vals = []
        counts: dict[int, int] = {}
        for k in rollout.prompts.index:
            vals.append(self.scores[k][counts.get(k, 0)])
            counts[k] = counts.get(k, 0) + 1
        t = torch.tensor(vals)
        return RewardOutput(t, t, torch.zeros_like(t), torch.zeros(len(t), dtype=torch.bool), details=[{}] * len(t))


SCORES = {0: [1, 1], 1: [1, 0], 2: [0, 0], 3: [0, 1], 4: [1, 0], 5: [1, 0]}


def test_dynamic_sampling_keeps_informative_groups_until_full():
    # round 1: prompts 0 (all 1), 1 (mixed) -> keeps 1; round 2: 2 (all 0), 3, 4 (mixed) -> keeps 3, 4 = 3 groups
    run = FakeRun(SCORES, [[0, 1], [2, 3, 4]])
    metrics: dict[str, float] = {}
    rollout, reward = collect_rollout(run, 2, 2, GroupFilter("acc", 5), metrics)
    assert rollout.prompts.index == [1, 1, 3, 3]  # trimmed to 2 groups, in generation order
    assert reward.scores.tolist() == [1, 0, 0, 1]
    # round 1 kept its uid 1, so round 2's uids are shifted by 2: prompt 3 (uid 1 in its round) gets 3
    assert rollout.uid.tolist() == [1, 1, 3, 3]
    assert metrics["train/num_gen_batches"] == 2.0
    assert metrics["train/kept_group_ratio"] == pytest.approx(3 / 5)
    assert rollout.response_ids.shape == (4, 4)  # round 1 had T=3, round 2 T=4: re-padded to 4
    assert rollout.response_mask[:2].tolist() == [[1, 1, 1, 0]] * 2


def test_dynamic_sampling_gives_up_after_max_rounds_with_a_clear_error():
    run = FakeRun(SCORES, [[0, 2], [0, 2], [0, 2]])
    with pytest.raises(HybridRLError, match=r"after 2 generation rounds only 0 of the data\.train_batch_size=1 groups.*"
                                            r"max_num_gen_batches"):
        collect_rollout(run, 2, 1, GroupFilter("acc", 2), {})


def test_without_a_filter_one_round_is_taken_as_is():
    run = FakeRun(SCORES, [[0, 2]])
    rollout, reward = collect_rollout(run, 2, 2, None, {})
    assert rollout.prompts.index == [0, 0, 2, 2] and reward.scores.tolist() == [1, 1, 0, 0]


def test_concat_rollouts_repads_prompts_left_and_responses_right():
    a = Rollout(prompts([0], 2), torch.tensor([[5, 6, 7]]), torch.tensor([[1, 1, 1]]), torch.tensor([[-1.0, -2, -3]]),
                torch.tensor([0]))
    b = Rollout(prompts([1], 3), torch.tensor([[8]]), torch.tensor([[1]]), torch.tensor([[-4.0]]), torch.tensor([0]))
    out = concat_rollouts([a, b], PAD)
    assert out.prompts.input_ids.tolist() == [[PAD, 7, 7], [7, 7, 7]]  # left padding keeps prompts flush right
    assert out.prompts.attention_mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    assert out.response_ids.tolist() == [[5, 6, 7], [8, PAD, PAD]]
    assert out.response_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert out.rollout_log_probs.tolist() == [[-1.0, -2.0, -3.0], [-4.0, 0.0, 0.0]]
    assert out.uid.tolist() == [0, 1]  # both were uid 0 in their own round
    seqs = out.sequences()
    assert seqs.input_ids[1][seqs.attention_mask[1].bool()].tolist() == [7, 7, 7, 8]
