"""The update's gradient must not depend on how a mini-batch is cut into micro-batches."""

import pytest
import torch

from hybridrl.algos.policy_losses import PolicyLossParams
from hybridrl.batch import Sequences, TrainBatch
from hybridrl.plan.levers import MicroBatching
from hybridrl.models.forward import Layout
from hybridrl.models.loading import load_causal_lm
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.policy import Policy, UpdateSettings


def settings(micro: int, mode: str = "token-mean", **kw) -> UpdateSettings:
    base = dict(mini_batch_size=8, micro_batch_size=micro, ppo_epochs=1, shuffle=False, loss_mode="vanilla",
                loss_params=PolicyLossParams(), loss_agg_mode=mode, loss_scale_factor=6.0, entropy_coeff=0.01, use_kl_loss=True,
                kl_loss_coef=0.1, kl_loss_type="low_var_kl", grad_clip=1e9, temperature=1.0, log_prob_micro_batch_size=8)
    base.update(kw)
    return UpdateSettings(**base)


def batch(vocab: int) -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    n, p, t = 8, 5, 6
    ids = torch.randint(3, vocab, (n, p + t), generator=g)
    lengths = torch.tensor([1, 6, 2, 6, 3, 5, 4, 6])  # uneven responses: padding must not count
    response_mask = (torch.arange(t)[None] < lengths[:, None]).long()
    attn = torch.cat([torch.ones(n, p, dtype=torch.long), response_mask], 1)
    adv = torch.randn(n, 1, generator=g) * response_mask
    old = -torch.rand(n, t, generator=g) * response_mask
    ref = -torch.rand(n, t, generator=g) * response_mask
    return TrainBatch(Sequences(ids, attn, response_mask), adv, old, old, ref)


def grads_after_update(model_dir: str, s: UpdateSettings) -> list[torch.Tensor]:
    module = load_causal_lm(model_dir)
    opt, sched = build_optimizer(module.parameters(), 0.0, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)  # lr 0: keep grads
    policy = Policy(module, opt, sched, engine=None, settings=s)
    metrics = policy.update(batch(module.config.vocab_size))
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    return [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_uneven_micro_batches_give_the_full_batch_gradient(random_model_dir, mode):
    full = grads_after_update(random_model_dir, settings(micro=8, mode=mode))
    parts = grads_after_update(random_model_dir, settings(micro=3, mode=mode))  # 3 + 3 + 2 rows
    assert any(g.abs().sum() > 0 for g in full)
    for a, b in zip(full, parts):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def grouped_batch(vocab: int) -> TrainBatch:
    """3 prompts of 3-5 tokens (left-padded to 6) x 4 responses of 1-6 tokens: GRPO-shaped, uneven."""
    g = torch.Generator().manual_seed(3)
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12], [13, 14, 15, 16]]
    lengths = [[1, 6, 2, 4], [3, 3, 6, 1], [5, 2, 2, 6]]
    P, T = 6, 6
    ids, attn, resp = [], [], []
    for p, ls in zip(prompts, lengths):
        for n in ls:
            r = torch.randint(3, vocab, (T,), generator=g)
            live = (torch.arange(T) < n).long()
            ids.append(torch.tensor([0] * (P - len(p)) + p + (r * live).tolist()))
            attn.append(torch.cat([torch.tensor([0] * (P - len(p)) + [1] * len(p)), live]))
            resp.append(live)
    ids, attn, mask = torch.stack(ids), torch.stack(attn), torch.stack(resp)
    adv = torch.randn(12, 1, generator=g) * mask
    old = -torch.rand(12, T, generator=g) * mask
    ref = -torch.rand(12, T, generator=g) * mask
    return TrainBatch(Sequences(ids, attn, mask), adv, old, old, ref)


def grouped_update(model_dir: str, s: UpdateSettings) -> tuple[list[torch.Tensor], dict, torch.Tensor]:
    module = load_causal_lm(model_dir)
    opt, sched = build_optimizer(module.parameters(), 0.0, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)  # lr 0: keep grads
    policy = Policy(module, opt, sched, engine=None, settings=s)
    b = grouped_batch(module.config.vocab_size)
    metrics = policy.update(b)
    log_probs = policy.log_probs(b.seqs)
    return [p.grad.clone() for p in module.parameters()], metrics, log_probs


@pytest.mark.parametrize("layout", [Layout(False, False), Layout(True, False), Layout(False, True), Layout(True, True)],
                         ids=["padded", "shared", "packed", "packed+shared"])
@pytest.mark.parametrize("max_tokens", [None, 11, 40])
def test_layouts_and_token_budgets_give_the_fixed_size_update(random_model_dir, layout, max_tokens):
    """Token-budget micro-batches (use_dynamic_bsz) and padding-free / shared-prompt layouts change how
    the mini-batch is cut and laid out, never the gradient, the metrics or the log-probs."""
    base = dict(mini_batch_size=12, log_prob_micro_batch_size=5)
    want, m_want, lp_want = grouped_update(random_model_dir, settings(micro=12, **base))
    got, m_got, lp_got = grouped_update(random_model_dir, settings(
        micro=12, layout=layout, max_tokens=max_tokens, log_prob_max_tokens=max_tokens, **base))
    assert any(g.abs().sum() > 0 for g in want)
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(lp_got, lp_want, atol=1e-5, rtol=0)
    for key in ("actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/pg_clipfrac"):
        assert m_got[key] == pytest.approx(m_want[key], rel=1e-5, abs=1e-6), key


def test_a_token_budget_cuts_the_mini_batch_into_more_micro_batches(random_model_dir):
    """11 tokens (one sequence at most) per micro-batch: every row alone, so the budget is really used."""
    from hybridrl.workers.update_loop import micro_batch_rows_of

    seqs = grouped_batch(320).seqs
    lengths = seqs.attention_mask.sum(-1).tolist()  # 4..11 tokens each, 87 in all
    rows = micro_batch_rows_of(seqs, MicroBatching(12, 11), keep_groups=True)
    assert len(rows) >= -(-sum(lengths) // 11) and all(sum(lengths[i] for i in r.tolist()) <= 11 for r in rows)
    rows = micro_batch_rows_of(seqs, MicroBatching(12, 40), keep_groups=True)  # the 4 rows of a prompt fit: kept
    assert all(any(set(range(4 * g, 4 * g + 4)) <= set(r.tolist()) for r in rows) for g in range(3))


def test_the_policy_gives_its_log_probs_and_the_entropy_of_a_real_model(random_model_dir):
    module = load_causal_lm(random_model_dir)
    policy = Policy(module, None, None, engine=None, settings=settings(micro=3, temperature=0.7, log_prob_micro_batch_size=3))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, module.config.vocab_size, (4, 7), generator=g)
    response_mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    seqs = Sequences(ids, torch.cat([torch.ones(4, 4, dtype=torch.long), response_mask], 1), response_mask)
    lp, entropy = policy.log_probs_and_entropy(seqs)
    assert torch.equal(lp, policy.log_probs(seqs))
    with torch.no_grad():  # each row alone, unpadded: the entropy of softmax(logits / 0.7) before each real token
        for i in range(4):
            n = int(response_mask[i].sum())
            logits = module(input_ids=ids[i:i + 1, :4 + n]).logits[0, 3:3 + n]
            expected = torch.distributions.Categorical(logits=logits / 0.7).entropy()
            assert torch.allclose(entropy[i, :n], expected, atol=1e-5) and (entropy[i, n:] == 0).all()


def test_an_engine_with_its_own_copy_samples_with_the_updated_weights(random_model_dir):
    """Policy.update syncs an engine that does not share the trainer's module (an async rollout worker's hf
    engine, vLLM): after the step the engine's weights are the trainer's, and they moved. (The slow tier checks
    the same for vLLM; here it is the fast tier's.)"""
    from hybridrl.rollout.hf import HFRolloutEngine

    module = load_causal_lm(random_model_dir)
    engine = HFRolloutEngine(load_causal_lm(random_model_dir), [2], 0, own_copy=True)
    opt, sched = build_optimizer(module.parameters(), 1e-2, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)
    policy = Policy(module, opt, sched, engine=engine, settings=settings(micro=8))
    before = {k: v.clone() for k, v in engine.module.state_dict().items()}
    metrics = policy.update(batch(module.config.vocab_size))
    assert "timing_s/update_weights" in metrics
    after, trainer = engine.module.state_dict(), module.state_dict()
    assert all(torch.equal(after[k], trainer[k]) for k in trainer)
    assert any(not torch.equal(before[k], after[k]) for k in before)
