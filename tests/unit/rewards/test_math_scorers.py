"""GSM8K (verl semantics) and MATH (math-verify) scorers, hand cases."""

from __future__ import annotations

import pytest

from hybridrl.rewards.scorers import SCORERS
from hybridrl.rewards.scorers.gsm8k import extract_answer
from hybridrl.rewards.scorers.math_answer import last_boxed


@pytest.mark.parametrize("text,strict,flexible", [
    ("so she makes 9 * 2 = 18 dollars.\n#### 18", "18", "18"),
    ("#### 1,234", "1234", "1234"),  # commas go before comparing
    ("first #### 3 then #### 5", "5", "5"),  # the last one counts
    ("The answer is 42.", None, "42."),  # no '####': strict finds nothing; flexible takes the last number
    ("#### -7", "-7", "-7"),
    ("####18", None, "18"),  # verl's strict pattern needs the space
    ("#### 5" + " pad" * 100, None, "5"),  # past the 300-character tail: strict does not see it
])
def test_gsm8k_extraction(text, strict, flexible):
    assert extract_answer(text, "strict") == strict
    if len(text) < 300:
        assert extract_answer(text, "flexible") == flexible


def test_gsm8k_scores_and_format_score():
    score = SCORERS.get("openai/gsm8k")
    assert score("openai/gsm8k", "... #### 72", "72") == 1.0
    assert score("openai/gsm8k", "... #### 71", "72") == 0.0
    assert score("openai/gsm8k", "... #### 71", "72", format_score=0.1) == 0.1  # right format, wrong number
    assert score("openai/gsm8k", "72", "72") == 0.0  # strict: no '####'
    assert score("openai/gsm8k", "72", "72", method="flexible") == 1.0


@pytest.mark.parametrize("text,boxed", [
    ("so \\boxed{5}.", "5"),
    ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces, last box
    ("\\fbox{x+1}", "x+1"),
    ("no box here", None),
    ("\\boxed{\\frac{1}{2", None),  # cut off inside the box
])
def test_last_boxed(text, boxed):
    assert last_boxed(text) == boxed


@pytest.mark.parametrize("response,truth,expected", [
    ("\\boxed{\\frac{1}{2}}", "\\frac12", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),  # numeric equivalence, not string equality
    ("\\boxed{(3, \\pi/2)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("\\boxed{0.6}", "\\frac{1}{2}", 0.0),
    ("the answer is 1/2", "\\frac{1}{2}", 0.0),  # no box, no score
])
def test_math_scorer_uses_equivalence(response, truth, expected):
    assert SCORERS.get("HuggingFaceH4/MATH-500")("HuggingFaceH4/MATH-500", response, truth) == expected
