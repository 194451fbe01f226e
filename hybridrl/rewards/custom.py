"""User reward functions written for verl, loaded from a file and used unchanged.

Per sample (verl's default): `compute_score(data_source, solution_str, ground_truth,
extra_info=None, **kwargs) -> float | dict` (a dict has "score"; its other keys are kept per
sample, and the numeric ones are logged as extras). Batched (`reward_model.reward_manager=batch`):
`compute_score(data_sources, solution_strs, ground_truths, extra_infos, **kwargs) -> list`.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Callable

from hybridrl.errors import ConfigError


def load_function(path: str, name: str) -> Callable[..., Any]:
    if not os.path.isfile(path):
        raise ConfigError(f"custom_reward_function.path={path!r}: file not found")
    spec = importlib.util.spec_from_file_location(f"hybridrl_custom_reward_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as e:  # the user's file: any error, reported with its type
        raise ConfigError(f"custom_reward_function.path={path!r} failed to import: {type(e).__name__}: {e}") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise ConfigError(f"custom_reward_function.name={name!r} is not a function in {path}; "
                          f"functions there: {', '.join(found) or 'none'}")
    return fn


def split_result(value: Any) -> tuple[float, dict[str, Any]]:
    """(score, extras) of a reward function's return value; extras are the dict's other keys."""
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
