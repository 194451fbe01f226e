"""Diversity of a set of responses, on whitespace tokens.

distinct-n (Li et al. 2016, "A Diversity-Promoting Objective Function for Neural Conversation
Models"): unique n-grams over all n-grams, pooled across the responses. The n-gram repetition
rate is the share of n-grams inside each response that repeat an earlier n-gram of that same
response (degenerate loops score high), pooled across responses. Self-BLEU (Zhu et al. 2018,
"Texygen: A Benchmarking Platform for Text Generation Models"): the mean over the texts of the
BLEU of each text against all the others as references; 1.0 when every text is the same, near 0
when they share nothing (lower is more diverse).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

BLEU_EPSILON = 0.1  # Chen & Cherry 2014 method 1 (the value NLTK uses, and so Texygen's numbers)


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


def bleu(hypothesis: str, references: Sequence[str], max_n: int = 4) -> float:
    """Sentence BLEU (Papineni et al. 2002) of one text against references, on whitespace tokens.

    p_n = sum over the hypothesis's n-grams of min(count in it, max count in any one reference)
    / its number of n-grams (modified precision with clipping). BLEU = BP * geometric mean of
    p_1 .. p_N with uniform weights, where:
    - N = min(max_n, hypothesis length): orders longer than the hypothesis have no n-grams and
      are left out, so a one-word text identical to a reference scores 1.0, not a smoothed 0.18;
    - a p_n with no match is smoothed to BLEU_EPSILON / (number of n-grams) (Chen & Cherry 2014,
      "A Systematic Comparison of Smoothing Techniques for Sentence-Level BLEU", method 1);
    - no shared unigram at all gives 0.0 exactly (smoothing is for sparse higher orders, not for
      texts with nothing in common);
    - BP = 1 if c > r else exp(1 - r / c), c the hypothesis length and r the reference length
      closest to c (the shorter one on a tie).
    An empty hypothesis, or no references, scores 0.0.
    """
    hyp = hypothesis.split()
    refs = [r.split() for r in references]
    if not hyp or not refs:
        return 0.0
    log_sum, order = 0.0, min(max_n, len(hyp))
    for n in range(1, order + 1):
        counts = Counter(ngrams(hyp, n))
        max_ref: Counter = Counter()
        for ref in refs:
            max_ref |= Counter(ngrams(ref, n))  # | keeps the larger count of each n-gram
        matches = sum(min(c, max_ref[g]) for g, c in counts.items())
        if matches == 0 and n == 1:
            return 0.0
        total = len(hyp) - n + 1
        log_sum += math.log((matches if matches else BLEU_EPSILON) / total)
    c = len(hyp)
    r = min((len(ref) for ref in refs), key=lambda length: (abs(length - c), length))
    brevity = 1.0 if c > r else math.exp(1 - r / c)
    return brevity * math.exp(log_sum / order)


def self_bleu(texts: Sequence[str], max_n: int = 4) -> float:
    """Mean over texts of bleu(text, the other texts); nan for fewer than 2 texts (no references:
    undefined, and 0.0 would read as perfectly diverse)."""
    if len(texts) < 2:
        return math.nan
    return sum(bleu(t, [*texts[:i], *texts[i + 1:]], max_n) for i, t in enumerate(texts)) / len(texts)
