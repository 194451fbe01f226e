"""User reward functions written for verl, loaded from a file and used unchanged.

Per sample (verl's default): `compute_score(data_source, solution_str, ground_truth,
extra_info=None, **kwargs) -> float | dict` (a dict has "score"; its other keys are kept per
sample, and the numeric ones are logged as extras). Batched (`reward_model.reward_manager=batch`):
`compute_score(data_sources, solution_strs, ground_truths, extra_infos, **kwargs) -> list`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from hybridrl.errors import ConfigError, setting
from hybridrl.user_code import import_file

KEYS = ("custom_reward_function.path", "custom_reward_function.name")  # the trainer's; `hybridrl eval` has flags


def load_function(path: str, name: str, keys: tuple[str, str] = KEYS) -> Callable[..., Any]:
    """The function `name` of the Python file `path`; `keys` name the two settings in errors."""
    if not os.path.isfile(path):
        raise ConfigError(f"{setting(keys[0], path)}: file not found")
    module = import_file(path, f"hybridrl_custom_reward_{abs(hash(path))}", setting(keys[0], path))
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise ConfigError(f"{setting(keys[1], name)} is not a function in {path}; "
                          f"functions there: {', '.join(found) or 'none'}")
    return fn


@dataclass(frozen=True)
class NoScore:
    """What a batched function returns for a response it could not score (the Python API's reward functions,
    hybridrl/api/rewards.py): that response fails with `reason`, the others keep their scores."""

    reason: str


def split_result(value: Any) -> tuple[float, dict[str, Any]]:
    """(score, extras) of a reward function's return value; extras are the dict's other keys. A ValueError
    says why the value is not a score."""
    if isinstance(value, NoScore):
        raise ValueError(value.reason)
    if isinstance(value, dict):
        if "score" not in value:
            raise ValueError(f"returned a dict without a 'score' key (keys: {sorted(value)})")
        score = value["score"]
        if not isinstance(score, (int, float)):
            raise ValueError(f"returned 'score' of type {type(score).__name__}; make it a float")
        return float(score), {k: v for k, v in value.items() if k != "score"}
    if isinstance(value, (int, float)):  # bool included
        return float(value), {}
    raise ValueError(f"returned {type(value).__name__}; return a float or a dict with 'score'")
