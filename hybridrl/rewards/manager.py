"""Turn rollouts into rewards: decode each response, score it (rule scorers by data_source or one
user function, in a process pool with a per-sample timeout; and/or a reward model), apply reward
shaping (DAPO's overlong buffer), and place the sequence reward on the last response token.

A scorer that raises, hangs or returns NaN/inf stops the run with the sample named
(`reward_model.on_error=raise`), or scores 0 and is counted in `reward/errors` (`zero`).
Never a silent NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from hybridrl.batch import Rollout
from hybridrl.errors import HybridRLError
from hybridrl.rewards.pool import NOT_SCORED, FunctionRef, Scored, ScoringPool
from hybridrl.rewards.scorers import SCORERS
from hybridrl.rewards.shaping import overlong_penalty


@dataclass(frozen=True)
class OverlongBuffer:
    max_response_length: int
    buffer_len: int
    penalty_factor: float


@dataclass(frozen=True)
class RewardSettings:
    on_error: str = "raise"  # schema.ON_ERROR: a failed sample stops the run, or scores 0 and is counted
    overlong: Optional[OverlongBuffer] = None  # DAPO's soft overlong punishment; None when off
    rm_weight: float = 1.0  # with a reward model: score = rm_weight * rm + rule_weight * rule
    rule_weight: float = 0.0  # ... 0: the rule scorers are not called (verl: the reward model replaces them)


@dataclass
class RewardOutput:
    scores: Tensor  # [N] the score before shaping (rule accuracy, or the reward-model mix); what validation reports
    rewards: Tensor  # [N] the sequence reward trained on: scores + shaping penalties
    overlong_penalty: Tensor  # [N] <= 0, included in `rewards`; all 0 when the buffer is off
    errors: Tensor  # [N] bool, True where the scorer failed and the score was set to 0 (on_error=zero)
    extras: dict[str, Tensor] = field(default_factory=dict)  # name -> [N]: numeric extras (acc, rm_score, ...)
    details: list[dict[str, Any]] = field(default_factory=list)  # [N] every extra as returned (pred, ...), plus error


def on_last_token(values: Tensor, response_mask: Tensor) -> Tensor:
    """Outcome reward as token rewards: values [N] on each response's last token; [N, T], 0 elsewhere."""
    # [N] index of the last generated token: the last 1 of the mask, which in a multi-turn response
    # (tool tokens masked 0) is not the count of 1s minus one
    last = (torch.arange(response_mask.shape[1]) * response_mask.cpu().bool()).argmax(-1)
    out = torch.zeros(response_mask.shape, dtype=torch.float32)
    out[torch.arange(len(values)), last] = values.float()
    return out * response_mask


def _numeric_extras(results: list[Scored]) -> dict[str, Tensor]:
    """Extras that every successful sample returned as a number, 0 for failed samples."""
    ok = [r.extras for r in results if r.error is None]
    keys = set.intersection(*(set(e) for e in ok)) if ok else set()
    keys = {k for k in keys if all(isinstance(e[k], (int, float)) for e in ok)}
    return {k: torch.tensor([float(r.extras[k]) if r.error is None else 0.0 for r in results]) for k in sorted(keys)}


class RewardManager:
    """Scores with the built-in scorer of each row's data_source or one user function (`pool`),
    and/or a reward model (`reward_model`, see workers/reward_model.py)."""

    def __init__(self, tokenizer, pool: Optional[ScoringPool] = None, settings: RewardSettings = RewardSettings(),
                 reward_model=None):
        self.tokenizer, self.settings, self.reward_model = tokenizer, settings, reward_model
        self.pool = pool or ScoringPool(FunctionRef(), num_workers=0, timeout_s=0.0)
        self.use_rules = reward_model is None or settings.rule_weight != 0

    def decode(self, rollout: Rollout) -> list[str]:
        """The model's own tokens of each response; a multi-turn response's tool turns are left out,
        so a tool's output earns reward only when the model writes the answer itself."""
        ids = [row[mask.bool()].tolist() for row, mask in zip(rollout.response_ids, rollout.response_mask)]
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def _rule_scores(self, rollout: Rollout, texts: list[str]) -> list[Scored]:
        p = rollout.prompts
        if not self.pool.ref.custom:  # an unknown data_source is a config error, not a per-sample failure
            for source in sorted(set(p.data_source)):
                SCORERS.get(source)
        infos = p.extra_info if p.extra_info is not None else [{} for _ in texts]
        raise_on_error = self.settings.on_error == "raise"
        results = self.pool.score(list(p.data_source), texts, list(p.ground_truth), infos, stop_on_error=raise_on_error,
                                  prompts=p.messages, columns=p.columns)
        unscored = sum(1 for r in results if r.error is not None and r.error.startswith(NOT_SCORED))
        failed = [i for i, r in enumerate(results) if r.error is not None and not r.error.startswith(NOT_SCORED)]
        if failed and raise_on_error:
            i = failed[0]
            stopped = f" ({unscored} left unscored: the batch stopped at the failure)" if unscored else ""
            raise HybridRLError(
                f"the reward function failed on {len(failed)} of {len(texts)} responses{stopped}; first: response {i} "
                f"(data_source={p.data_source[i]!r}, dataset row {p.index[i]}, response {texts[i][:60]!r}): "
                f"{results[i].error}. Fix the function, or set reward_model.on_error=zero to score failures 0 "
                "and count them (reward/errors)")
        return results

    def score(self, rollout: Rollout, texts: Optional[list[str]] = None) -> RewardOutput:
        """`texts`: the responses as the scorers see them; None: decode(rollout). Agent rollouts give the final
        assistant turn of each trajectory (rollout/agent/scoring.py)."""
        texts = self.decode(rollout) if texts is None else texts
        n = len(rollout.uid)
        s = self.settings
        results = self._rule_scores(rollout, texts) if self.use_rules else [Scored(0.0, {})] * n
        rule = torch.tensor([r.score for r in results], dtype=torch.float32)
        extras = _numeric_extras(results) if self.use_rules else {}
        scores = rule
        if self.reward_model is not None:
            rm = self.reward_model.scores(rollout, texts)
            extras["rm_score"] = rm
            if self.use_rules:
                extras["rule_score"] = rule
            scores = s.rm_weight * rm + s.rule_weight * rule
        penalty = torch.zeros_like(scores)
        if s.overlong is not None:
            o = s.overlong
            penalty = overlong_penalty(rollout.response_mask.sum(-1), o.max_response_length, o.buffer_len,
                                       o.penalty_factor)
        details = [dict(r.extras, **({"error": r.error} if r.error else {})) for r in results]
        return RewardOutput(scores=scores, rewards=scores + penalty, overlong_penalty=penalty,
                            errors=torch.tensor([r.error is not None for r in results]), extras=extras, details=details)

    def close(self) -> None:
        self.pool.close()
