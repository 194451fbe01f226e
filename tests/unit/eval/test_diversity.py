"""Diversity metrics on small strings checked by hand."""

from __future__ import annotations

from hybridrl.eval.diversity import distinct_n, repetition_rate


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
