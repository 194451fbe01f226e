"""Turn rollouts into rewards: decode each response, score it by its data_source, apply reward
shaping (DAPO's overlong buffer), and place the sequence reward on the last response token."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from hybridrl.batch import Rollout
from hybridrl.errors import HybridRLError
from hybridrl.rewards.custom import split_result
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
    extras: dict[str, Tensor] = field(default_factory=dict)  # name -> [N], numeric extras every sample returned


def on_last_token(values: Tensor, response_mask: Tensor) -> Tensor:
    """Outcome reward as token rewards: values [N] on each response's last token; [N, T], 0 elsewhere."""
    last = (response_mask.sum(-1) - 1).clamp(min=0)  # [N] index of the last generated token
    out = torch.zeros(response_mask.shape, dtype=torch.float32)
    out[torch.arange(len(values)), last] = values.float()
    return out * response_mask


class RewardManager:
    """Scores with the built-in scorer of each row's data_source, or with one user function for
    all rows (`custom_fn`, per sample or `batched`)."""

    def __init__(self, tokenizer, overlong: Optional[OverlongBuffer] = None,
                 custom_fn: Optional[Callable[..., Any]] = None, batched: bool = False):
        self.tokenizer, self.overlong = tokenizer, overlong
        self.custom_fn, self.batched = custom_fn, batched

    def decode(self, rollout: Rollout) -> list[str]:
        ids = [row[mask.bool()].tolist() for row, mask in zip(rollout.response_ids, rollout.response_mask)]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def _call(self, texts: list[str], rollout: Rollout) -> list[Any]:
        p = rollout.prompts
        infos = p.extra_info if p.extra_info is not None else [{} for _ in texts]
        if self.custom_fn is not None and self.batched:
            values = list(self.custom_fn(data_sources=p.data_source, solution_strs=texts, ground_truths=p.ground_truth,
                                         extra_infos=infos))
            if len(values) != len(texts):
                raise HybridRLError(f"the batched reward function returned {len(values)} results for {len(texts)} "
                                    "responses; return one per response")
            return values
        return [(self.custom_fn or SCORERS.get(src))(src, text, truth, extra_info=info)
                for src, text, truth, info in zip(p.data_source, texts, p.ground_truth, infos)]

    def score(self, rollout: Rollout) -> RewardOutput:
        texts = self.decode(rollout)
        scores, extras = [], []
        for i, value in enumerate(self._call(texts, rollout)):
            source = rollout.prompts.data_source[i]
            try:
                score, extra = split_result(value, f"scorer for data_source={source!r} on sample {i}")
            except ValueError as e:
                raise HybridRLError(str(e)) from None
            if not math.isfinite(score):
                raise HybridRLError(f"scorer for data_source={source!r} returned {score} for sample {i} ({texts[i][:60]!r})")
            scores.append(score)
            extras.append(extra)
        score_t = torch.tensor(scores, dtype=torch.float32)
        common = set.intersection(*(set(e) for e in extras)) if extras else set()
        penalty = torch.zeros_like(score_t)
        if self.overlong is not None:
            o = self.overlong
            penalty = overlong_penalty(rollout.response_mask.sum(-1), o.max_response_length, o.buffer_len,
                                       o.penalty_factor)
        return RewardOutput(scores=score_t, rewards=score_t + penalty, overlong_penalty=penalty,
                            extras={k: torch.tensor([e[k] for e in extras]) for k in sorted(common)})
