"""Turn rollouts into rewards: decode each response, score it by its data_source, apply reward
shaping (DAPO's overlong buffer), and place the sequence reward on the last response token."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from hybridrl.batch import Rollout
from hybridrl.errors import HybridRLError
from hybridrl.rewards.scorers import SCORERS
from hybridrl.rewards.shaping import overlong_penalty


@dataclass(frozen=True)
class OverlongBuffer:
    max_response_length: int
    buffer_len: int
    penalty_factor: float


@dataclass
class RewardOutput:
    scores: Tensor  # [N] the scorers' values (accuracy for rule scorers); what validation reports
    rewards: Tensor  # [N] the sequence reward trained on: scores + shaping penalties
    overlong_penalty: Tensor  # [N] <= 0, included in `rewards`; all 0 when the buffer is off


def on_last_token(values: Tensor, response_mask: Tensor) -> Tensor:
    """Outcome reward as token rewards: values [N] on each response's last token; [N, T], 0 elsewhere."""
    last = (response_mask.sum(-1) - 1).clamp(min=0)  # [N] index of the last generated token
    out = torch.zeros(response_mask.shape, dtype=torch.float32)
    out[torch.arange(len(values)), last] = values.float()
    return out * response_mask


class RewardManager:
    def __init__(self, tokenizer, overlong: Optional[OverlongBuffer] = None):
        self.tokenizer, self.overlong = tokenizer, overlong

    def decode(self, rollout: Rollout) -> list[str]:
        ids = [row[mask.bool()].tolist() for row, mask in zip(rollout.response_ids, rollout.response_mask)]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def score(self, rollout: Rollout) -> RewardOutput:
        texts = self.decode(rollout)
        scores = []
        for i, (text, source, truth) in enumerate(zip(texts, rollout.prompts.data_source, rollout.prompts.ground_truth)):
            value = float(SCORERS.get(source)(source, text, truth))
            if not math.isfinite(value):
                raise HybridRLError(f"scorer for data_source={source!r} returned {value} for sample {i} ({text[:60]!r})")
            scores.append(value)
        score_t = torch.tensor(scores, dtype=torch.float32)
        penalty = torch.zeros_like(score_t)
        if self.overlong is not None:
            o = self.overlong
            penalty = overlong_penalty(rollout.response_mask.sum(-1), o.max_response_length, o.buffer_len,
                                       o.penalty_factor)
        return RewardOutput(scores=score_t, rewards=score_t + penalty, overlong_penalty=penalty)
