"""actor.skip_zero_advantage: responses with advantage 0 on every token leave the update's forward and
backward, and the update (gradients, AdamW's step, the loss) is the one computed with them."""

from __future__ import annotations

import sys

import pytest
import torch

from hybridrl.algos.policy_losses import POLICY_LOSSES, PolicyLossParams
from hybridrl.algos.zero_advantage import rows_with_signal, why_not_exact
from hybridrl.batch import Sequences, TrainBatch, select
from hybridrl.models.forward import Layout
from hybridrl.models.loading import load_causal_lm
from hybridrl.workers.optim import build_optimizer
from hybridrl.trainer.phases import old_log_probs_with_signal
from hybridrl.workers.policy import Policy

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_policy import grouped_batch, settings  # noqa: E402

EXACT = dict(entropy_coeff=0.0, use_kl_loss=False)
ZERO_GROUP = slice(4, 8)  # grouped_batch: 3 prompts x 4 responses; the second prompt's group has equal rewards


def zero_group_batch(vocab: int) -> TrainBatch:
    b = grouped_batch(vocab)
    adv = b.advantages.clone()
    adv[ZERO_GROUP] = 0.0
    return TrainBatch(b.seqs, adv, b.rollout_log_probs, b.old_log_probs, b.ref_log_probs)


def run_update(model_dir: str, skip: bool, lr: float = 0.0, data: TrainBatch | None = None, **kw):
    """(gradients after the last optimizer step, weights after the update, metrics, forwarded rows)."""
    module = load_causal_lm(model_dir)
    opt, sched = build_optimizer(module.parameters(), lr, 0.01, [0.9, 0.999], 0, 1, "constant", 0.0)
    s = settings(**{"micro": 12, "mini_batch_size": 12, **EXACT, **kw, "skip_zero_advantage": skip})
    policy = Policy(module, opt, sched, engine=None, settings=s)
    rows = []  # rows of each forward that builds a graph (for a backward)

    def count(_, args, kwargs):
        if torch.is_grad_enabled():
            rows.append(int(kwargs.get("input_ids", args[0] if args else None).shape[0]))

    hook = module.register_forward_pre_hook(count, with_kwargs=True)
    metrics = policy.update(data if data is not None else zero_group_batch(module.config.vocab_size))
    hook.remove()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in module.parameters()]
    return grads, {k: v.clone() for k, v in module.state_dict().items()}, metrics, rows


def test_rows_with_signal_reads_response_tokens_only():
    adv = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 7.0], [float("nan"), 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]])
    assert rows_with_signal(adv, mask).tolist() == [False, True, False, True]  # padding ignored; NaN kept


@pytest.mark.parametrize("loss_mode", sorted(POLICY_LOSSES.names()))
def test_every_flagged_loss_has_zero_loss_and_gradient_at_zero_advantage(loss_mode):
    """The registry's promise that skipping relies on, at ratios far from 1 (clipped, dual-clipped)."""
    if not POLICY_LOSSES.entry(loss_mode).meta.get("zero_at_zero_advantage"):
        pytest.skip(f"{loss_mode} does not claim it")
    g = torch.Generator().manual_seed(0)
    log_probs = (-torch.rand(4, 5, generator=g) * 3).requires_grad_()
    old = log_probs.detach() + torch.randn(4, 5, generator=g)
    mask = torch.ones(4, 5)
    out = POLICY_LOSSES.get(loss_mode)(log_probs, old, torch.zeros(4, 5), mask, PolicyLossParams())
    assert torch.equal(out.loss, torch.zeros_like(out.loss))
    (grad,) = torch.autograd.grad(out.loss.sum(), log_probs)
    assert torch.equal(grad.abs(), torch.zeros_like(grad))


def test_skipping_is_refused_where_other_terms_read_every_row():
    assert why_not_exact("vanilla", 0.0, False) is None
    assert "entropy_coeff" in why_not_exact("vanilla", 0.01, False)
    assert "use_kl_loss" in why_not_exact("vanilla", 0.0, True)
    entry = POLICY_LOSSES.entry("gpg")
    entry.meta.pop("zero_at_zero_advantage")
    try:
        assert "loss_mode=gpg" in why_not_exact("gpg", 0.0, False)
    finally:
        entry.meta["zero_at_zero_advantage"] = True


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo", "cispo", "sapo"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_skipping_gives_the_same_gradient_and_loss(random_model_dir, loss_mode, mode):
    want, _, m_want, rows_want = run_update(random_model_dir, False, loss_mode=loss_mode, loss_agg_mode=mode)
    got, _, m_got, rows_got = run_update(random_model_dir, True, loss_mode=loss_mode, loss_agg_mode=mode)
    assert sum(rows_want) == 12 and sum(rows_got) == 8  # the zero group's 4 responses were not computed
    assert any(g.abs().sum() > 0 for g in want)
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, atol=1e-7, rtol=1e-5)
    assert m_got["actor/pg_loss"] == pytest.approx(m_want["actor/pg_loss"], rel=1e-5, abs=1e-8)
    assert m_got["actor/skipped_frac"] == pytest.approx(1 / 3) and "actor/skipped_frac" not in m_want


@pytest.mark.parametrize("layout", [Layout(True, False), Layout(False, True), Layout(True, True)],
                         ids=["shared", "packed", "packed+shared"])
@pytest.mark.parametrize("max_tokens", [None, 11, 40])
def test_skipping_composes_with_layouts_and_token_budgets(random_model_dir, layout, max_tokens):
    kw = dict(layout=layout, max_tokens=max_tokens, micro=5)
    want, *_ = run_update(random_model_dir, False, **kw)
    got, *_ = run_update(random_model_dir, True, **kw)
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, atol=1e-7, rtol=1e-5)


def test_metrics_are_means_over_the_rows_computed(random_model_dir):
    """actor/entropy with skipping is the entropy of the 8 rows with a gradient, as an update of those alone reports."""
    b = zero_group_batch(load_causal_lm(random_model_dir).config.vocab_size)
    kept = select(b, torch.tensor([0, 1, 2, 3, 8, 9, 10, 11]))
    _, _, alone, _ = run_update(random_model_dir, False, data=kept, mini_batch_size=8, micro=8)
    _, _, got, _ = run_update(random_model_dir, True)
    for key in ("actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "training/rollout_probs_diff_mean"):
        assert got[key] == pytest.approx(alone[key], rel=1e-5, abs=1e-8), key


def test_a_mini_batch_with_no_gradient_still_takes_adamw_s_step(random_model_dir):
    """Three mini-batches (one per prompt), the middle one all zero advantage: no backward, yet it must still
    step AdamW with a zero gradient (its moments decay and it moves the weights), as the unskipped update does;
    its metrics come from a forward without gradients, so every metric equals the unskipped update's."""
    _, want, m_want, _ = run_update(random_model_dir, False, lr=1e-2, mini_batch_size=4, micro=4)
    _, got, m_got, rows = run_update(random_model_dir, True, lr=1e-2, mini_batch_size=4, micro=4)
    assert sum(rows) == 8
    for key in ("actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_loss", "training/rollout_probs_diff_max"):
        assert m_got[key] == pytest.approx(m_want[key], rel=1e-5, abs=1e-7), key
    moved = [k for k, w in got.items() if not torch.equal(w, load_causal_lm(random_model_dir).state_dict()[k])]
    assert moved
    for key, w in want.items():
        torch.testing.assert_close(got[key], w, atol=1e-6, rtol=0)
    assert m_got["actor/skipped_frac"] == pytest.approx(1 / 3)  # averaged over the three optimizer steps


def test_entropy_or_kl_keep_every_row(random_model_dir):
    from hybridrl.plan.levers import skips_zero_advantage, zero_advantage_note
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig

    cfg = load_config(RLConfig, None, [])
    assert skips_zero_advantage(cfg) and zero_advantage_note(cfg) is None
    cfg = load_config(RLConfig, None, ["actor_rollout_ref.actor.entropy_coeff=0.001"])
    assert not skips_zero_advantage(cfg) and "entropy_coeff" in zero_advantage_note(cfg)
    cfg = load_config(RLConfig, None, ["actor_rollout_ref.actor.skip_zero_advantage=false"])
    assert not skips_zero_advantage(cfg) and zero_advantage_note(cfg) is None


class CountingPolicy:
    def __init__(self):
        self.rows = []

    def log_probs(self, seqs: Sequences) -> torch.Tensor:
        self.rows.append(seqs.input_ids[:, 0].tolist())
        return torch.full(seqs.response_mask.shape, -1.0)


def test_old_log_probs_are_computed_for_rows_with_a_gradient_only():
    b = zero_group_batch(320)
    b.seqs.input_ids[:, 0] = torch.arange(12)  # tag each row
    engine = torch.full(b.seqs.response_mask.shape, -2.0)
    policy = CountingPolicy()
    out = old_log_probs_with_signal(policy, b.seqs, rows_with_signal(b.advantages, b.seqs.response_mask), engine)
    assert policy.rows == [[0, 1, 2, 3, 8, 9, 10, 11]]
    assert (out[ZERO_GROUP] == -2.0).all() and (out[:4] == -1.0).all() and (out[8:] == -1.0).all()
    none = TrainBatch(b.seqs, torch.zeros_like(b.advantages), None, None, None)
    policy.rows.clear()
    signal = rows_with_signal(none.advantages, none.seqs.response_mask)
    assert torch.equal(old_log_probs_with_signal(policy, none.seqs, signal, engine), engine)
    assert policy.rows == []
