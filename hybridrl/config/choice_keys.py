"""The keys whose value names a plug-in of a registry (an estimator, a loss, a reduction), checked for every
config whether or not the rest of the config reads them.

A misspelt name must not wait for the day its switch is turned on: `algorithm.kl_penalty=0.01` (a tutorial's
"KL penalty 0.01", a coefficient) with `use_kl_in_reward=false` would otherwise be accepted silently, and fail
only in the run that turns the penalty on. The keys with a fixed list of choices declare it in the schema
(config/constraints.py checks them); these are the ones whose valid names live in a registry.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from hybridrl.algos.advantages import ADV_ESTIMATORS
from hybridrl.algos.kl import KL_ESTIMATORS
from hybridrl.algos.policy_losses import POLICY_LOSSES
from hybridrl.algos.reduce import LOSS_AGG_MODES
from hybridrl.algos.rollout_correction import ROLLOUT_IS, ROLLOUT_RS
from hybridrl.config.schema import RLConfig
from hybridrl.errors import ConfigError, raise_all
from hybridrl.registry import Registry

ARR = "actor_rollout_ref"
# an estimator key given a number: the user meant a coefficient, which lives elsewhere
_COEFFICIENT = ("; it names the KL estimator, not a coefficient: the KL coefficient is algorithm.kl_ctrl.kl_coef (in "
                f"the reward, with algorithm.use_kl_in_reward=true) or {ARR}.actor.kl_loss_coef (in the loss, with "
                f"{ARR}.actor.use_kl_loss=true)")


@dataclass(frozen=True)
class ChoiceKey:
    key: str  # dotted
    registry: Registry
    numbers_mean: str = ""  # appended when the value is a number (what a number would be, and where it goes)


CHOICE_KEYS: tuple[ChoiceKey, ...] = (
    ChoiceKey("algorithm.adv_estimator", ADV_ESTIMATORS),
    ChoiceKey("algorithm.kl_penalty", KL_ESTIMATORS, _COEFFICIENT),
    ChoiceKey(f"{ARR}.actor.kl_loss_type", KL_ESTIMATORS, _COEFFICIENT),
    ChoiceKey(f"{ARR}.actor.loss_agg_mode", LOSS_AGG_MODES),
    ChoiceKey(f"{ARR}.actor.policy_loss.loss_mode", POLICY_LOSSES),
    ChoiceKey("critic.loss_agg_mode", LOSS_AGG_MODES),
    ChoiceKey("distillation.distillation_loss.loss_mode", KL_ESTIMATORS),
    ChoiceKey("algorithm.rollout_correction.rollout_is", ROLLOUT_IS),  # null: off
    ChoiceKey("algorithm.rollout_correction.rollout_rs", ROLLOUT_RS),  # null: off
)


def choice_problem(choice: ChoiceKey, value: Optional[str]) -> Optional[str]:
    """The one-line error for a value the registry does not know (naming the key and the valid names), or None."""
    if value is None or value in choice.registry:
        return None
    try:
        choice.registry.entry(value, choice.key)
    except ConfigError as e:
        return str(e) + (choice.numbers_mean if _is_number(value) else "")
    return None


def check_choice_keys(cfg: RLConfig) -> None:
    """Every registry-named key of `cfg` is a registered name (or null where the key may be off); all problems
    at once (errors.ConfigErrors)."""
    problems = [choice_problem(c, functools.reduce(getattr, c.key.split("."), cfg)) for c in CHOICE_KEYS]
    raise_all([p for p in problems if p])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
