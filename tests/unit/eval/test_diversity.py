"""Diversity metrics on small strings checked by hand."""

from __future__ import annotations

import math

from hybridrl.eval.diversity import bleu, distinct_n, repetition_rate, self_bleu


def test_distinct_n_by_hand():
    texts = ["the cat sat", "the cat ran"]
    assert distinct_n(texts, 1) == 4 / 6  # the, cat, sat, ran of 6 tokens
    assert distinct_n(texts, 2) == 3 / 4  # (the cat) twice, (cat sat), (cat ran)
    assert distinct_n(["same", "same"], 1) == 0.5
    assert distinct_n(["a"], 2) == 0.0  # no bigram at all


def test_repetition_rate_by_hand():
    assert repetition_rate(["a b c a b c"], 3) == 1 / 4  # abc bca cab abc: one repeat of 4
    assert repetition_rate(["a a a a"], 3) == 1 / 2  # aaa aaa: one repeat of 2
    assert repetition_rate(["x y z", "x y z"], 3) == 0.0  # repeats across texts are diversity's business, not this
    assert repetition_rate([""], 3) == 0.0


def test_bleu_by_hand():
    assert bleu("a b c d", ["a b c d"]) == 1.0
    assert bleu("a b c d", ["e f g h"]) == 0.0  # no shared word
    assert bleu("", ["a"]) == 0.0 and bleu("a", []) == 0.0
    # clipping: "the" counts once (the reference has it once): p1 = 1/3; (the the) x2 unmatched: p2 = 0.1/2;
    # (the the the) unmatched: p3 = 0.1/1; c = 3 > r = 2 so BP = 1 -> (1/3 * 0.05 * 0.1)^(1/3) = (1/600)^(1/3)
    assert math.isclose(bleu("the the the", ["the cat"]), (1 / 600) ** (1 / 3))
    # two references: an n-gram may match either; r is the reference length closest to c = 3,
    # the shorter (2) on a tie with 4, so BP = 1 (the longer one would give exp(1 - 4/3) = 0.72)
    assert bleu("a b c", ["a b", "a b c d"]) == 1.0
    # brevity: c = 2 < r = 4, p1 = p2 = 1 -> exp(1 - 4/2) = e^-1
    assert math.isclose(bleu("a b", ["a b c d"]), math.exp(-1))
    # order 1 only for a one-word text: identical -> 1.0 (not the smoothed p2..p4 of NLTK)
    assert bleu("7", ["7"]) == 1.0
    assert math.isclose(bleu("a b c d", ["a b c d"], max_n=2), 1.0)


def test_self_bleu_by_hand():
    assert self_bleu(["a b c d", "a b c d", "a b c d"]) == 1.0  # identical texts
    assert self_bleu(["a b c d", "e f g h", "i j k l"]) == 0.0  # disjoint vocabularies
    # "a b c" vs "a b d" both ways: p1 = 2/3, p2 = 1/2 (a b), p3 = 0.1/1 smoothed; BP = 1 -> (1/30)^(1/3) = 0.3218
    assert math.isclose(self_bleu(["a b c", "a b d"]), (1 / 30) ** (1 / 3))
    # "a b" vs "a b c d": p1 = p2 = 1, BP = exp(1 - 4/2) = e^-1;
    # "a b c d" vs "a b": p1 = 2/4, p2 = 1/3, p3 = 0.1/2, p4 = 0.1/1, BP = 1 -> (1/1200)^(1/4) = 0.1699
    assert math.isclose(self_bleu(["a b", "a b c d"]), (math.exp(-1) + (1 / 1200) ** 0.25) / 2)
    assert math.isclose(self_bleu(["a b", "a b c d"]), 0.26889, abs_tol=1e-5)
    assert math.isnan(self_bleu(["only one"])) and math.isnan(self_bleu([]))
    # more similar groups score higher
    assert self_bleu(["x y z w", "x y z v"]) > self_bleu(["x y z w", "x q r s"]) > 0.0


def test_eval_diversity_is_per_prompt_group():
    from hybridrl.eval.evaluate import diversity_metrics

    m = diversity_metrics(["x", "x", "x", "y"], n=2)  # groups [x, x] and [x, y]
    assert m["diversity/distinct_1"] == (1 / 2 + 2 / 2) / 2  # pooled over all four it would be 2/4
    assert m["diversity/self_bleu"] == (1.0 + 0.0) / 2
    assert math.isnan(m["diversity/distinct_2"]) and math.isnan(m["diversity/rep3"])  # no bigram anywhere
    m = diversity_metrics(["a b", "a b", "c", "d"], n=2)  # only the first group has bigrams
    assert m["diversity/distinct_2"] == 1 / 2
    assert math.isnan(diversity_metrics(["a b", "c d"], n=1)["diversity/self_bleu"])  # one text per group
