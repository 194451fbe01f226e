"""Rule scorers, looked up by a row's `data_source`.

Each has verl's signature `compute_score(data_source, solution_str, ground_truth,
extra_info=None) -> float`, so a verl reward function drops in unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

from hybridrl.registry import Registry

Scorer = Callable[..., Any]
SCORERS: Registry[Scorer] = Registry("reward scorer", "data_source")

from hybridrl.rewards.scorers import arithmetic  # noqa: E402,F401  (each module registers its data_sources)
from hybridrl.rewards.scorers import gsm8k, math_answer  # noqa: E402,F401
