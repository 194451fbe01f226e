"""Diversity of a set of responses, on whitespace tokens.

distinct-n (Li et al. 2016, "A Diversity-Promoting Objective Function for Neural Conversation
Models"): unique n-grams over all n-grams, pooled across the responses. The n-gram repetition
rate is the share of n-grams inside each response that repeat an earlier n-gram of that same
response (degenerate loops score high), pooled across responses.
"""

from __future__ import annotations

from typing import Sequence


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Unique n-grams / all n-grams over the texts; 0.0 when there are none."""
    grams = [g for t in texts for g in ngrams(t.split(), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def repetition_rate(texts: Sequence[str], n: int = 3) -> float:
    """Share of n-grams that repeat an earlier n-gram of the same text; 0.0 when there are none."""
    repeated = total = 0
    for t in texts:
        grams = ngrams(t.split(), n)
        repeated += len(grams) - len(set(grams))
        total += len(grams)
    return repeated / total if total else 0.0
