"""Scorer of the synthetic arithmetic task: 1.0 when the last integer in the response is the answer."""

from __future__ import annotations

import re

from hybridrl.rewards.scorers.registry import SCORERS

INTEGER = re.compile(r"-?\d+")


@SCORERS.register("arithmetic", "1.0 if the last integer in the response equals the ground truth, else 0.0")
def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    numbers = INTEGER.findall(solution_str)
    return 1.0 if numbers and int(numbers[-1]) == int(ground_truth) else 0.0
