"""MATH scorer (data_sources `HuggingFaceH4/MATH-500`, `DigitalLearningGmbH/MATH-lighteval`, `math`):
the response's last `\\boxed{...}` must be mathematically equivalent to the ground truth.

Equivalence is decided by the math-verify library (symbolic and numeric comparison of parsed
LaTeX: `\\frac{1}{2}` = `0.5`, `(3, \\pi/2)` = `\\left( 3, \\frac{\\pi}{2} \\right)`), not by
string matching. A response without a boxed answer scores 0.
"""

from __future__ import annotations

from hybridrl.rewards.scorers.registry import SCORERS

MATH_SOURCES = ("HuggingFaceH4/MATH-500", "DigitalLearningGmbH/MATH-lighteval", "math")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1:i]
    return None  # unbalanced: the response was cut off inside the box


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    from math_verify import parse, verify  # heavy (sympy): imported by the scorer that needs it

    answer = last_boxed(solution_str)
    if answer is None:
        return 0.0
    gold = parse(f"${ground_truth}$")
    pred = parse(f"${answer}$")
    if not gold or not pred:
        return 0.0
    return 1.0 if verify(gold, pred) else 0.0


for _source in MATH_SOURCES:
    SCORERS.register(_source, "1.0 if the last \\boxed{} answer is equivalent to the ground truth (math-verify)")(
        compute_score)
