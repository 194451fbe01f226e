"""A warning when training has no learning signal.

Group-relative estimators (GRPO and its family: `needs_groups` in algos/advantages.py) compare the
n responses of a prompt with each other; a group whose responses all got the same reward has zero
advantage everywhere. When nearly every group is like that, step after step, `actor/pg_loss` is 0
and the policy does not move, while the run looks healthy. `critic/frac_zero_std_groups`
(trainer/metrics.py) measures it; this module turns a streak of it into one warning that names the
likely causes and the keys to change. With a critic (gae) or a batch baseline a group of equal
rewards still has a signal, so those estimators are not watched; nor is a run with a distillation loss.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from hybridrl.rewards.scorers import SCORERS

THRESHOLD = 0.9  # share of groups without spread that counts as no signal
PATIENCE = 5  # steps in a row, or the whole run when it is shorter
KEY = "critic/frac_zero_std_groups"


@dataclass(frozen=True)
class SignalContext:
    """What the warning names: the run's settings behind each likely cause."""

    estimator: str
    n: int  # responses per prompt
    max_response_length: int
    temperature: float
    scorer_hints: tuple[str, ...]  # how each data_source's scorer reads an answer


@dataclass
class ZeroSignalWatch:
    context: SignalContext
    patience: int  # steps in a row before warning; 0: never warns
    threshold: float = THRESHOLD
    warned: bool = False
    recent: deque = field(default_factory=deque)  # the metrics of the current streak's last `patience` steps

    @classmethod
    def of_run(cls, run, estimator) -> "ZeroSignalWatch":
        """The watch for an RLRun and its advantage estimator's registry entry."""
        steps = run.total_steps - (run.resume.step if run.resume is not None else 0)
        # a distillation loss trains every response, equal rewards or not: no streak to warn about
        watched = estimator.meta.get("needs_groups") and run.loop.distill is None
        patience = min(PATIENCE, max(steps, 1)) if watched else 0
        sources = sorted({record.data_source for record in run.train_data.records})
        context = SignalContext(estimator.name, run.loop.n, run.loop.max_response_length, run.sampling.temperature,
                                scorer_hints(sources, run.reward.pool.ref.path, run.reward.reward_model is not None,
                                             run.reward.pool.ref.function))
        return cls(context, patience)

    def observe(self, metrics: dict[str, float]) -> Optional[str]:
        """The warning, the first time `patience` steps in a row have `critic/frac_zero_std_groups`
        >= threshold; else None."""
        if self.patience == 0 or self.warned or KEY not in metrics:
            return None
        if metrics[KEY] < self.threshold:
            self.recent.clear()
            return None
        self.recent.append(metrics)
        if len(self.recent) < self.patience:
            return None
        self.warned = True
        return zero_signal_message(list(self.recent), self.threshold, self.context)


def scorer_hints(sources: list[str], custom_path: Optional[str], reward_model: bool,
                 function: Optional[object] = None) -> tuple[str, ...]:
    """One line per way the rewards are computed: the custom function (a file's, or `function` given from
    Python), or each data_source's scorer."""
    if function is not None:
        return ("the reward function given to hybridrl.train scores every response: check what it expects",)
    if custom_path is not None:
        return (f"custom_reward_function.path={custom_path} scores every response: check what it expects",)
    hints = [f"{s}: {SCORERS.entry(s).doc}" for s in sources[:3] if s in SCORERS]
    if reward_model:
        hints.append("reward_model.model.path scores too (reward_model.rm_weight / rule_weight)")
    return tuple(hints)


def _mean(window: list[dict[str, float]], key: str) -> Optional[float]:
    values = [m[key] for m in window if key in m]
    return sum(values) / len(values) if values else None


def zero_signal_message(window: list[dict[str, float]], threshold: float, c: SignalContext) -> str:
    """The warning for `window`, the metrics of the steps without signal; several lines."""
    frac, accuracy = _mean(window, KEY), _mean(window, "reward/accuracy")
    clip, length = _mean(window, "response_length/clip_ratio"), _mean(window, "response_length/mean")
    score = _mean(window, "critic/score/mean")
    head = (f"WARNING: no learning signal in the last {len(window)} step(s): in each, {threshold:.0%} or more of the "
            f"prompt groups ({KEY}, mean {frac:.2f}) gave all their {c.n} responses the same reward"
            + (f" (critic/score/mean {score:.3g})" if score is not None else "")
            + f", so {c.estimator}'s advantages are 0 and the policy does not change (actor/pg_loss 0). Likely causes "
            "and the keys to try:")
    causes = ["responses cut before the answer: "
              + (f"{clip:.0%} of them hit " if clip is not None else "")
              + f"data.max_response_length={c.max_response_length}"
              + (f" (mean length {length:.0f})" if length is not None else "") + "; raise it",
              "answers not in the form the scorer reads ("
              + ("; ".join(c.scorer_hints) or "the data_source's scorer") + "); read the responses with "
              "trainer.rollout_data_dir=<folder>, or fix the prompt or the scorer (custom_reward_function.path)",
              f"samples too alike: raise actor_rollout_ref.rollout.temperature (now {c.temperature:g}) "
              f"or actor_rollout_ref.rollout.n (now {c.n})"]
    if accuracy is not None and accuracy >= 0.5:
        causes.append("data too easy for the model (every response right): harder data (data.train_files)")
    else:
        causes.append("data too hard for the model: easier data (data.train_files), or a stronger or "
                      "SFT-tuned model (actor_rollout_ref.model.path)")
    return "\n".join([head] + [f"  - {cause}" for cause in causes])
