"""The critic: a value head on the backbone, and an update whose gradient ignores micro-batching."""

import pytest
import torch

from hybridrl.batch import Sequences
from hybridrl.models.forward import Layout, batched_values, response_values
from hybridrl.models.loading import load_value_model
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.critic import Critic, CriticBatch, CriticSettings


def critic_batch(vocab: int) -> CriticBatch:
    g = torch.Generator().manual_seed(1)
    n, p, t = 8, 4, 5
    ids = torch.randint(3, vocab, (n, p + t), generator=g)
    response_mask = (torch.arange(t)[None] < torch.tensor([1, 5, 2, 5, 3, 4, 4, 5])[:, None]).long()
    attn = torch.cat([torch.ones(n, p, dtype=torch.long), response_mask], 1)
    values = torch.randn(n, t, generator=g) * 0.1 * response_mask
    returns = torch.randn(n, t, generator=g) * response_mask
    return CriticBatch(Sequences(ids, attn, response_mask), values, returns)


def grads_after_update(model_dir: str, micro: int, mode: str, **kw) -> tuple[list[torch.Tensor], dict]:
    torch.manual_seed(0)
    module = load_value_model(model_dir, "critic.model.path")
    opt, sched = build_optimizer(module.parameters(), 0.0, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)  # lr 0: keep grads
    s = CriticSettings(mini_batch_size=8, micro_batch_size=micro, forward_micro_batch_size=8, ppo_epochs=1,
                       shuffle=False, cliprange_value=0.2, loss_agg_mode=mode, grad_clip=1e9, **kw)
    metrics = Critic(module, opt, sched, s).update(critic_batch(module.config.vocab_size))
    return [p.grad.clone() for p in module.parameters()], metrics


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("max_tokens", [None, 9, 25])
def test_critic_packing_and_token_budgets_give_the_fixed_size_update(random_model_dir, packed, max_tokens):
    full, m_full = grads_after_update(random_model_dir, 8, "token-mean")
    got, m_got = grads_after_update(random_model_dir, 8, "token-mean", layout=Layout(packed=packed),
                                    max_tokens=max_tokens, forward_max_tokens=max_tokens)
    for a, b in zip(full, got):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)
    assert m_got["critic/vf_loss"] == pytest.approx(m_full["critic/vf_loss"], rel=1e-5)


def test_critic_values_with_packing_and_budgets(random_model_dir):
    torch.manual_seed(0)
    module = load_value_model(random_model_dir, "critic.model.path")
    opt, sched = build_optimizer(module.parameters(), 0.0, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)
    seqs = critic_batch(module.config.vocab_size).seqs
    values = []
    for kw in ({}, dict(layout=Layout(packed=True), forward_max_tokens=9)):  # 9 tokens: one row per forward
        s = CriticSettings(mini_batch_size=8, micro_batch_size=8, forward_micro_batch_size=3, ppo_epochs=1,
                           shuffle=False, cliprange_value=0.2, loss_agg_mode="token-mean", grad_clip=1e9, **kw)
        values.append(Critic(module, opt, sched, s).values(seqs))
    torch.testing.assert_close(values[1], values[0], atol=1e-5, rtol=0)
    assert values[0].abs().sum() > 0


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_critic_gradient_does_not_depend_on_micro_batches(random_model_dir, mode):
    full, m_full = grads_after_update(random_model_dir, 8, mode)
    parts, m_parts = grads_after_update(random_model_dir, 3, mode)  # 3 + 3 + 2 rows
    assert all(g.abs().sum() > 0 for g in full)  # backbone and head both learn
    for a, b in zip(full, parts):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean"):
        assert m_full[key] == pytest.approx(m_parts[key], rel=1e-5, abs=1e-7)
    assert 0.0 < m_full["critic/vf_clipfrac"] < 1.0  # random values drift past +-0.2 on some tokens only


def test_value_model_keeps_the_backbone_and_reads_values_before_each_token(random_model_dir):
    from hybridrl.models.loading import load_causal_lm

    lm = load_causal_lm(random_model_dir)
    critic = load_value_model(random_model_dir, "critic.model.path")
    for (name, a), b in zip(lm.model.named_parameters(), critic.model.parameters()):
        assert torch.equal(a, b), name
    seqs = critic_batch(lm.config.vocab_size).seqs
    values = response_values(critic, seqs)
    # the value of response token t is the head's output at the position before it (prompt end - 1 + t)
    full = critic(input_ids=seqs.input_ids, attention_mask=seqs.attention_mask).logits[..., 0]
    torch.testing.assert_close(values[1], full[1, 3:8])
    assert torch.all(values[0, 1:] == 0)  # padding
    torch.testing.assert_close(batched_values(critic, seqs, 3), values.detach())
