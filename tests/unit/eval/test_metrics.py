"""Sample metrics against examples worked by hand."""

from __future__ import annotations

import itertools

import pytest

from hybridrl.eval.metrics import best_at_k, group_metrics, ks_up_to, maj_at_k, pass_at_k, worst_at_k


@pytest.mark.parametrize("n,c,k,expected", [
    (4, 1, 1, 0.25),  # one draw hits the single correct of 4
    (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    (5, 0, 3, 0.0), (5, 5, 1, 1.0),
    (8, 3, 4, 1 - 5 / 70),  # C(5,4) = 5, C(8,4) = 70
    (3, 2, 2, 1.0),  # n - c < k: every pair has a correct one
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_equals_brute_force_over_subsets():
    correct = [1, 0, 0, 1, 0, 0, 0]
    for k in range(1, 8):
        subsets = list(itertools.combinations(correct, k))
        assert pass_at_k(7, 2, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_best_and_worst_at_k_by_hand():
    scores = [0.0, 1.0, 0.5, 0.2]
    # pairs: (0,1) (0,.5) (0,.2) (1,.5) (1,.2) (.5,.2): maxes 1 .5 .2 1 1 .5 -> 4.2/6; mins 0 0 0 .5 .2 .2 -> .9/6
    assert best_at_k(scores, 2) == pytest.approx(4.2 / 6)
    assert worst_at_k(scores, 2) == pytest.approx(0.9 / 6)
    assert best_at_k(scores, 1) == pytest.approx(0.425) == worst_at_k(scores, 1)  # the mean
    assert best_at_k(scores, 4) == 1.0 and worst_at_k(scores, 4) == 0.0


def test_maj_at_k_by_hand():
    preds, scores = ["7", "7", "8", "9"], [1.0, 1.0, 0.0, 0.0]
    # k=3, the 4 subsets: (0,1,2) 7 wins, (0,1,3) 7 wins, (0,2,3) and (1,2,3) tie -> 7 (seen first): all 1.0
    assert maj_at_k(preds, scores, 3) == 1.0
    # k=2: (0,1) 7:1 (0,2) tie->7:1 (0,3) 7:1 (1,2) 7:1 (1,3) 7:1 (2,3) tie->8:0 -> 5/6
    assert maj_at_k(preds, scores, 2) == pytest.approx(5 / 6)
    # the majority wins over the first seen: 8 8 7 with 7 correct
    assert maj_at_k(["7", "8", "8"], [1.0, 0.0, 0.0], 3) == 0.0


def test_group_metrics_names_and_ks():
    assert ks_up_to(1) == [1] and ks_up_to(4) == [1, 2, 4] and ks_up_to(6) == [1, 2, 4, 6]
    m = group_metrics([1.0, 0.0, 0.0, 0.0], preds=["3", "4", "4", "5"])
    assert m["mean@4"] == 0.25 and m["std@4"] == pytest.approx(0.4330127)
    assert m["pass@1"] == 0.25 and m["pass@2"] == 0.5 and m["pass@4"] == 1.0
    assert m["best@4"] == 1.0 and m["worst@2"] == 0.0 and m["maj@4"] == 0.0  # "4" is the majority, wrong
    assert group_metrics([1.0]) == {"mean@1": 1.0, "std@1": 0.0}
