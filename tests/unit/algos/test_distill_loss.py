"""On-policy distillation's loss (algos/distill.py): per-token KL(student || teacher) estimates worked out by
hand, their gradients w.r.t. the student's log-probs, masking of padding and tool tokens, and the reduction
by every loss_agg_mode."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.algos.distill import (
    distillation_advantages,
    distillation_loss,
    distillation_pg_loss,
    distillation_token_kl,
    teacher_metrics,
    without_task_advantages,
)
from hybridrl.algos.policy_losses import PolicyLossParams
from hybridrl.algos.reduce import LossScale

E = math.e


def test_k1_and_k3_token_values_by_hand():
    # x = log π_s - log π_t. Token 0: s=-1, t=-2 -> x = 1: k1 = 1; k3 = e^{-x} + x - 1 = e^{-1}.
    # Token 1: s=-2, t=-1 -> x = -1: k1 = -1; k3 = e^{1} - 1 - 1 = e - 2.
    s, t = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-2.0, -1.0]])
    assert distillation_token_kl(s, t, "k1").tolist() == [[1.0, -1.0]]
    torch.testing.assert_close(distillation_token_kl(s, t, "k3"), torch.tensor([[1 / E, E - 2]]))
    # the straight-through k3+ has k3's value
    torch.testing.assert_close(distillation_token_kl(s, t, "k3+"), torch.tensor([[1 / E, E - 2]]))
    # equal log-probs: every estimator is exactly 0
    for name in ("k1", "k2", "k3", "k1+", "k3+"):
        assert distillation_token_kl(t, t, name).abs().max().item() == 0.0


def _grad(estimator: str, s_values, t_values, mode="token-mean", mask=None):
    s = torch.tensor(s_values, requires_grad=True)
    t = torch.tensor(t_values)
    mask = torch.ones_like(t) if mask is None else torch.tensor(mask)
    distillation_loss(s, t, mask, estimator, mode).backward()
    return s.grad


def test_gradient_wrt_student_log_probs_by_hand():
    s, t = [[-1.0, -2.0]], [[-2.0, -1.0]]
    # k3 = e^{t-s} - (t-s) - 1: d/ds = 1 - e^{t-s}; token 0: 1 - e^{-1}, token 1: 1 - e; token-mean halves them
    torch.testing.assert_close(_grad("k3", s, t), torch.tensor([[(1 - 1 / E) / 2, (1 - E) / 2]]))
    # k1+ / k3+: gradient of k2 = (s-t)^2/2, i.e. x = s - t (the reverse-KL gradient): 1 and -1, halved
    torch.testing.assert_close(_grad("k1+", s, t), torch.tensor([[0.5, -0.5]]))
    torch.testing.assert_close(_grad("k3+", s, t), torch.tensor([[0.5, -0.5]]))
    # k1's gradient is 1 per token whatever the teacher says: why validate.py refuses it as a loss
    assert _grad("k1", s, t).tolist() == _grad("k1", s, [[-9.0, 3.0]]).tolist() == [[0.5, 0.5]]


def test_the_teacher_gets_no_gradient():
    s = torch.tensor([[-1.0]], requires_grad=True)
    t = torch.tensor([[-2.0]], requires_grad=True)
    distillation_loss(s, t, torch.ones(1, 1), "k3", "token-mean").backward()
    assert t.grad is None and s.grad is not None


# Row 0: two generated tokens and a padding token; row 1: one generated token with equal log-probs (k3 = 0), a
# tool token (mask 0) and padding. Under the mask every k3 is in (0, 10) with a non-zero gradient, so a leak
# would show in the value, the max and the gradient (the padding's k3 = e^{-2.9} + 1.9 ~ 1.96 > e - 2).
S = [[-1.0, -2.0, -0.1], [-0.5, -1.0, -0.1]]
T = [[-2.0, -1.0, -3.0], [-0.5, -0.5, -3.0]]
MASK = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
ROW0 = 1 / E + (E - 2)  # k3 sum of row 0; row 1 sums to 0


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", ROW0 / 3),  # three generated tokens in all
    ("token-sum", ROW0),
    ("seq-mean-token-sum", ROW0 / 2),  # two responses
    ("seq-mean-token-mean", (ROW0 / 2 + 0.0) / 2),  # row 0 has 2 tokens, row 1 has 1 (k3 = 0)
    ("seq-mean-token-sum-norm", ROW0 / (2 * 3)),  # responses x T (= 3, the norm length by default)
])
def test_aggregation_modes_and_masking(mode, expected):
    loss = distillation_loss(torch.tensor(S), torch.tensor(T), torch.tensor(MASK), "k3", mode)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_padding_and_tool_tokens_get_exactly_zero_gradient():
    grad = _grad("k3", S, T, mask=MASK)
    assert grad[0, 2].item() == 0.0 and grad[1, 1].item() == 0.0 and grad[1, 2].item() == 0.0
    # generated tokens: (1 - e^{t-s}) / 3 under token-mean; row 1's token has s = t, so 0
    torch.testing.assert_close(grad[0, :2], torch.tensor([(1 - 1 / E) / 3, (1 - E) / 3]))
    assert grad[1, 0].item() == 0.0


def test_the_mini_batch_scale_normalises_a_micro_batch():
    # a micro-batch of 3 tokens inside a mini-batch of 6: token-mean divides by 6, so two such micro-batches sum
    # to the full mini-batch loss (algos/reduce.py)
    loss = distillation_loss(torch.tensor(S), torch.tensor(T), torch.tensor(MASK), "k3", "token-mean",
                             LossScale(num_tokens=6.0, num_seqs=4.0, norm_length=3.0))
    assert loss.item() == pytest.approx(ROW0 / 6, rel=1e-6)


def test_teacher_metrics_over_response_tokens_only():
    m = teacher_metrics(torch.tensor(S), torch.tensor(T), torch.tensor(MASK), "k3")
    assert m["distill/teacher_kl_mean"] == pytest.approx(ROW0 / 3, rel=1e-6)
    assert m["distill/teacher_kl_max"] == pytest.approx(E - 2, rel=1e-6)  # not the padding's ~1.96
    assert m["distill/teacher_logprob_mean"] == pytest.approx((-2.0 - 1.0 - 0.5) / 3, rel=1e-6)


def test_pure_distillation_drops_the_task_advantages():
    adv = torch.tensor([[0.5, -1.0], [2.0, 0.0]])
    assert without_task_advantages(adv).tolist() == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("estimator, direction", [("k3", "forward"), ("k3+", "reverse"), ("k1+", "reverse"),
                                                  ("k2", "reverse")])
def test_expected_gradient_is_the_documented_kl(estimator, direction):
    """Over every token a of a 5-token vocabulary, weighted by π_s(a) (the expectation over student samples, the
    sampling itself held fixed as in training), the loss gradient w.r.t. the student's logits equals the exact
    gradient of KL(π_t || π_s) for k3 and of KL(π_s || π_t) for the k2-gradient estimators (docs/algorithms.md)."""
    theta = torch.tensor([0.3, -1.0, 0.8, 0.1, -0.4], dtype=torch.float64, requires_grad=True)
    log_t = torch.log_softmax(torch.tensor([1.0, 0.2, -0.5, 0.4, -1.2], dtype=torch.float64), -1)
    log_s = torch.log_softmax(theta, -1)
    per_token = distillation_token_kl(log_s[None], log_t[None], estimator)[0]  # [V] the loss if a were sampled
    (expected,) = torch.autograd.grad((log_s.exp().detach() * per_token).sum(), theta, retain_graph=True)
    s, t = log_s.exp(), log_t.exp()
    kl = (s * (log_s - log_t)).sum() if direction == "reverse" else (t * (log_t - log_s)).sum()
    (exact,) = torch.autograd.grad(kl, theta, retain_graph=True)
    torch.testing.assert_close(expected, exact)
    other = (t * (log_t - log_s)).sum() if direction == "reverse" else (s * (log_s - log_t)).sum()
    (wrong,) = torch.autograd.grad(other, theta)
    assert (expected - wrong).abs().max() > 1e-2  # the two directions really differ here


def test_policy_gradient_advantages_are_minus_the_detached_estimate():
    s = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    t = torch.tensor([[-2.0, -1.0]])
    adv = distillation_advantages(s, t, "k1")
    assert adv.tolist() == [[-1.0, 1.0]] and not adv.requires_grad  # reward log π_t - log π_s
    torch.testing.assert_close(distillation_advantages(s, t, "k3"), torch.tensor([[-1 / E, -(E - 2)]]))


def test_policy_gradient_with_k1_at_ratio_one_has_the_gradient_of_k1_plus_as_a_loss():
    # vanilla PPO loss -A r with A = -x, r = 1 (old = current): d/ds = -A = x, as k1+ (gradient of x^2/2)
    s1 = torch.tensor(S, requires_grad=True)
    s2 = torch.tensor(S, requires_grad=True)
    t, mask = torch.tensor(T), torch.tensor(MASK)
    distillation_pg_loss(s1, s1.detach(), t, mask, "k1", "vanilla", PolicyLossParams(), "token-mean").backward()
    distillation_loss(s2, t, mask, "k1+", "token-mean").backward()
    torch.testing.assert_close(s1.grad, s2.grad)
    # by hand: row 0's tokens x = 1 and -1, over 3 tokens; row 1's generated token x = 0; masked tokens 0
    torch.testing.assert_close(s1.grad, torch.tensor([[1 / 3, -1 / 3, 0.0], [0.0, 0.0, 0.0]]))


@pytest.mark.parametrize("estimator, expected", [("k1", "reverse"), ("k3", "reverse - forward")])
def test_expected_policy_gradient_of_each_reward(estimator, expected):
    """As a detached per-token reward at ratio 1, the expected gradient is E_s[k ∇ log π_s]: k1 gives the reverse
    KL's gradient; k3 gives ∇ KL(s || t) - ∇ KL(t || s) (algos/distill.py), which is why validate.py warns."""
    theta = torch.tensor([0.3, -1.0, 0.8, 0.1, -0.4], dtype=torch.float64, requires_grad=True)
    log_t = torch.log_softmax(torch.tensor([1.0, 0.2, -0.5, 0.4, -1.2], dtype=torch.float64), -1)
    log_s = torch.log_softmax(theta, -1)
    ones = torch.ones(1, 5, dtype=torch.float64)
    value = distillation_pg_loss(log_s[None], log_s.detach()[None], log_t[None], ones, estimator, "vanilla",
                                 PolicyLossParams(clip_ratio_low=10.0, clip_ratio_high=10.0), "token-sum")
    # the expectation weights each token by π_s(a), which a mask cannot: the surrogate -A r is rebuilt per token
    # from the code's advantages (the code's own loss path is checked at ratio 1 by the test above)
    adv = distillation_advantages(log_s[None], log_t[None], estimator)[0]
    surrogate = (log_s.exp().detach() * -adv * torch.exp(log_s - log_s.detach())).sum()
    (got,) = torch.autograd.grad(surrogate, theta, retain_graph=True)
    s, t = log_s.exp(), log_t.exp()
    reverse, forward = (s * (log_s - log_t)).sum(), (t * (log_t - log_s)).sum()
    target = reverse if expected == "reverse" else reverse - forward
    (exact,) = torch.autograd.grad(target, theta, retain_graph=True)
    torch.testing.assert_close(got, exact)
    assert value.item() == pytest.approx(-adv.sum().item())  # the surrogate's value at ratio 1: sum of k
