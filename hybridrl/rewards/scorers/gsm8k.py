"""GSM8K scorer with verl's semantics (data_source `openai/gsm8k`).

The final answer is the number after the last `####` (strict mode) or the last number anywhere
(flexible mode), read from the response's last 300 characters only: a long response cannot be
searched for a lucky match. Commas and dollar signs are dropped before comparing strings with
the ground truth (which preprocessing stores without commas). A wrong answer in the right format
gets `format_score` (0.0 by default).
"""

from __future__ import annotations

import re

from hybridrl.rewards.scorers.registry import SCORERS

TAIL_CHARS = 300
STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(\-?[0-9\.\,]+)")


def extract_answer(solution_str: str, method: str = "strict") -> str | None:
    """The final answer as a string without commas/dollar signs, or None when none is found."""
    tail = solution_str[-TAIL_CHARS:]
    if method == "strict":
        found = STRICT.findall(tail)
        return found[-1].replace(",", "").replace("$", "") if found else None
    if method == "flexible":
        numbers = [n for n in FLEXIBLE.findall(tail) if n not in ("", ".")]
        return numbers[-1].replace(",", "").replace("$", "") if numbers else None
    raise ValueError(f"gsm8k scorer: method={method!r} is not strict or flexible")


@SCORERS.register("openai/gsm8k", "1.0 if the number after the last '####' (last 300 chars) equals the answer, "
                                  "else format_score (0.0); method='flexible' takes the last number")
def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  method: str = "strict", format_score: float = 0.0, score: float = 1.0) -> float:
    answer = extract_answer(solution_str, method)
    if answer is None:
        return 0.0
    return score if answer == ground_truth else format_score
