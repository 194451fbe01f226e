"""The Bradley–Terry reward-model loss and its gradients, worked out by hand."""

import math

import torch

from hybridrl.algos.bradley_terry import bradley_terry_loss, pair_stats


def _loss_and_grads(r_c: float, r_r: float, margin=None, center=0.0):
    c = torch.tensor([r_c], requires_grad=True)
    r = torch.tensor([r_r], requires_grad=True)
    m = None if margin is None else torch.tensor([margin])
    loss = bradley_terry_loss(c, r, m, center)
    loss.sum().backward()
    return loss.item(), c.grad.item(), r.grad.item()


def test_loss_and_gradients_without_margin():
    # r_c - r_r = 1: loss = -log sigmoid(1) = log(1 + e^-1) = 0.313262;
    # d/dr_c = -(1 - sigmoid(1)) = -sigmoid(-1) = -0.268941, and d/dr_r is its negative
    loss, g_c, g_r = _loss_and_grads(1.0, 0.0)
    assert math.isclose(loss, 0.3132616875182228, rel_tol=1e-6)
    assert math.isclose(g_c, -0.2689414213699951, rel_tol=1e-6)
    assert math.isclose(g_r, 0.2689414213699951, rel_tol=1e-6)


def test_margin_is_subtracted_inside_the_sigmoid():
    # m = 0.5: the pair must be separated by more than 0.5, so diff = 1 - 0.5 = 0.5:
    # loss = log(1 + e^-0.5) = 0.474077, d/dr_c = -sigmoid(-0.5) = -0.377541
    loss, g_c, g_r = _loss_and_grads(1.0, 0.0, margin=0.5)
    assert math.isclose(loss, 0.4740769841801067, rel_tol=1e-6)
    assert math.isclose(g_c, -0.3775406687981454, rel_tol=1e-6)
    assert math.isclose(g_r, 0.3775406687981454, rel_tol=1e-6)


def test_centering_term_adds_its_square_and_gradient():
    # 0.1 * (1 + 0)^2 = 0.1 more loss; its gradient 0.1 * 2 * (r_c + r_r) = 0.2 on both rewards
    loss, g_c, g_r = _loss_and_grads(1.0, 0.0, center=0.1)
    assert math.isclose(loss, 0.3132616875182228 + 0.1, rel_tol=1e-6)
    assert math.isclose(g_c, -0.2689414213699951 + 0.2, rel_tol=1e-6)
    assert math.isclose(g_r, 0.2689414213699951 + 0.2, rel_tol=1e-6)


def test_a_badly_wrong_pair_stays_finite():
    # diff = -100: sigmoid underflows in float32, but -logsigmoid(-100) = 100 + log(1 + e^-100) ≈ 100
    loss, g_c, _ = _loss_and_grads(-100.0, 0.0)
    assert math.isclose(loss, 100.0, rel_tol=1e-6) and math.isclose(g_c, -1.0, rel_tol=1e-6)


def test_pair_stats_sum_the_batch_and_a_tie_is_not_correct():
    c, r = torch.tensor([2.0, 0.0, 1.0]), torch.tensor([1.0, 0.0, 3.0])  # diffs 1, 0, -2
    stats = pair_stats(c, r)
    assert stats.count == 3 and stats.correct == 1.0 and stats.margin_sum == -1.0
    expected = sum(math.log1p(math.exp(-d)) for d in (1.0, 0.0, -2.0))
    assert math.isclose(stats.loss_sum.item(), expected, rel_tol=1e-6)
    # two micro-batches add up to the whole batch
    a, b = pair_stats(c[:2], r[:2]), pair_stats(c[2:], r[2:])
    assert math.isclose((a.loss_sum + b.loss_sum).item(), stats.loss_sum.item(), rel_tol=1e-6)
    assert a.correct + b.correct == stats.correct and a.margin_sum + b.margin_sum == stats.margin_sum
