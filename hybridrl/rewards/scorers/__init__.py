"""Rule scorers, looked up by a row's `data_source`.

Each has verl's signature `compute_score(data_source, solution_str, ground_truth,
extra_info=None) -> float`, so a verl reward function drops in unchanged.
"""

from __future__ import annotations

from hybridrl.rewards.scorers import arithmetic, gsm8k, math_answer  # noqa: F401  (each registers its data_sources)
from hybridrl.rewards.scorers.registry import SCORERS, Scorer

__all__ = ["SCORERS", "Scorer"]
