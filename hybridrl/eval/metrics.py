"""Metrics over the n samples of one prompt, exact where an expectation can be computed exactly.

`pass@k` is the unbiased estimator of Chen et al. 2021 (Codex, eq. 1):
    pass@k = 1 - C(n - c, k) / C(n, k)   for c correct of n samples.
`best@k` / `worst@k` are the expected max / min score of k samples drawn without replacement
from the n, computed exactly from the order statistics: with scores sorted ascending
s_(1) <= ... <= s_(n), P(the max of k is s_(i)) = C(i - 1, k - 1) / C(n, k).
`maj@k` is the expected score of the majority answer (`pred`) among k drawn samples; exact by
enumeration when C(n, k) is small, else a seeded Monte-Carlo mean.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from math import comb
from typing import Hashable, Sequence

MAJ_EXACT_LIMIT = 5000  # subsets enumerated exactly up to this many
MAJ_SAMPLES = 2000  # Monte-Carlo draws above it


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples (of n, c correct) is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def best_at_k(scores: Sequence[float], k: int) -> float:
    """E[max of k scores drawn without replacement]."""
    s, n = sorted(scores), len(scores)
    return sum(v * comb(i, k - 1) for i, v in enumerate(s)) / comb(n, k)


def worst_at_k(scores: Sequence[float], k: int) -> float:
    """E[min of k scores drawn without replacement]."""
    s, n = sorted(scores), len(scores)
    return sum(v * comb(n - 1 - i, k - 1) for i, v in enumerate(s)) / comb(n, k)


def _vote(preds: Sequence[Hashable], scores: Sequence[float], subset: Sequence[int]) -> float:
    """Score of the most frequent pred in `subset`; a tie goes to the pred seen first."""
    counts = Counter(preds[i] for i in subset)
    top = max(counts.values())
    winner = next(preds[i] for i in subset if counts[preds[i]] == top)
    return next(scores[i] for i in subset if preds[i] == winner)


def maj_at_k(preds: Sequence[Hashable], scores: Sequence[float], k: int, seed: int = 0) -> float:
    """E[score of the majority pred among k samples drawn without replacement]."""
    n = len(preds)
    if comb(n, k) <= MAJ_EXACT_LIMIT:
        subsets = list(itertools.combinations(range(n), k))
    else:
        rng = random.Random(seed)
        subsets = [rng.sample(range(n), k) for _ in range(MAJ_SAMPLES)]
    return sum(_vote(preds, scores, s) for s in subsets) / len(subsets)


def ks_up_to(n: int) -> list[int]:
    """1, 2, 4, ... <= n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def group_metrics(scores: Sequence[float], preds: Sequence[Hashable] | None = None,
                  correct: Sequence[bool] | None = None) -> dict[str, float]:
    """Per-prompt `mean@n`, `std@n` and, for n > 1, `best@k`, `worst@k`, `maj@k` (with preds) and
    `pass@k` (with correct, default score > 0) for k in ks_up_to(n)."""
    n = len(scores)
    mean = sum(scores) / n
    out = {f"mean@{n}": mean, f"std@{n}": (sum((s - mean) ** 2 for s in scores) / n) ** 0.5}
    if n == 1:
        return out
    hits = sum(bool(c) for c in (correct if correct is not None else [s > 0 for s in scores]))
    for k in ks_up_to(n):
        out[f"best@{k}"] = best_at_k(scores, k)
        out[f"worst@{k}"] = worst_at_k(scores, k)
        out[f"pass@{k}"] = pass_at_k(n, hits, k)
        if preds is not None:
            out[f"maj@{k}"] = maj_at_k(preds, scores, k)
    return out
