"""Turn rollouts into rewards: decode each response, score it by its data_source, and put
the score on the response's last token (outcome reward)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from hybridrl.batch import Rollout
from hybridrl.errors import HybridRLError
from hybridrl.rewards.scorers import SCORERS


@dataclass
class RewardOutput:
    scores: Tensor  # [N] one score per response
    token_level_scores: Tensor  # [N, T] the score on the last response token, 0 elsewhere


class RewardManager:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

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
        mask = rollout.response_mask
        last = (mask.sum(-1) - 1).clamp(min=0)  # [N] index of the last generated token
        token_scores = torch.zeros(mask.shape, dtype=torch.float32)
        token_scores[torch.arange(len(scores)), last] = score_t
        return RewardOutput(scores=score_t, token_level_scores=token_scores * mask)
