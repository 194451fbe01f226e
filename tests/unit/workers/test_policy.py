"""The update's gradient must not depend on how a mini-batch is cut into micro-batches."""

import pytest
import torch

from hybridrl.algos.policy_losses import PolicyLossParams
from hybridrl.batch import Sequences, TrainBatch
from hybridrl.models.loading import load_causal_lm
from hybridrl.trainer.optim import build_optimizer
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
