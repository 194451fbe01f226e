"""bf16 compute over fp32 masters, per role, against the fp32 path.

What must hold: the trained parameters, their gradients and the AdamW moments stay fp32 (an update
of lr 1e-6 would vanish in bf16 weights); the losses, gradients, log-probs and values stay within
bf16's rounding of the fp32 ones; and bf16 is really used (the results are not bit-equal to fp32).

Tolerances, from bf16's 8-bit mantissa (relative rounding 2^-9 ~ 0.002 per op, accumulated over two
layers of the 32-wide test model): scalar losses within 1 %, the whole gradient's direction within
cosine 0.9999, each gradient tensor within 5 % of its norm, log-probs and values within 0.01 (measured:
cosine 0.999995, 1-3 %, 0.0015).
"""

from __future__ import annotations

import pytest
import torch

from hybridrl.parallel.sharding import Replicated
from hybridrl.models.loading import load_causal_lm, load_value_model
from hybridrl.models.precision import FP32, Precision
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.critic import Critic, CriticSettings
from hybridrl.workers.policy import Policy
from hybridrl.workers.reference import Reference
from test_critic import critic_batch
from test_policy import batch, settings

BF16 = Precision.of("bf16")


def policy_update(model_dir: str, precision: Precision, **kw) -> tuple[Policy, dict]:
    module = load_causal_lm(model_dir)
    opt, sched = build_optimizer(module.parameters(), 1e-3, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)
    policy = Policy(module, opt, sched, engine=None, settings=settings(micro=3, **kw),
                    sharding=Replicated(precision=precision))
    return policy, policy.update(batch(module.config.vocab_size))


def critic_update(model_dir: str, precision: Precision) -> tuple[Critic, dict]:
    torch.manual_seed(0)
    module = load_value_model(model_dir, "critic.model.path")
    opt, sched = build_optimizer(module.parameters(), 1e-3, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)
    s = CriticSettings(mini_batch_size=8, micro_batch_size=3, forward_micro_batch_size=8, ppo_epochs=1, shuffle=False,
                       cliprange_value=0.2, loss_agg_mode="token-mean", grad_clip=1e9)
    critic = Critic(module, opt, sched, s, sharding=Replicated(precision=precision))
    return critic, critic.update(critic_batch(module.config.vocab_size))


def assert_fp32_masters(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in module.parameters())
    moments = [v for s in optimizer.state.values() for k, v in s.items() if k != "step"]
    assert len(moments) == 2 * len(list(module.parameters()))  # the step really ran
    assert all(m.dtype == torch.float32 for m in moments)


def assert_close_gradients(fp32: torch.nn.Module, bf16: torch.nn.Module) -> None:
    a = [p.grad.flatten() for p in fp32.parameters()]
    b = [p.grad.flatten() for p in bf16.parameters()]
    assert torch.nn.functional.cosine_similarity(torch.cat(a), torch.cat(b), dim=0) > 0.9999
    for x, y in zip(a, b):
        assert (x - y).norm() <= 0.05 * x.norm() + 1e-6
    assert any(not torch.equal(x, y) for x, y in zip(a, b))  # bf16 really computed something else


def test_policy_update_in_bf16_keeps_fp32_masters_and_the_fp32_gradient(random_model_dir):
    plain, m32 = policy_update(random_model_dir, FP32)
    mixed, m16 = policy_update(random_model_dir, BF16)
    assert_fp32_masters(mixed.module, mixed.optimizer)
    assert_close_gradients(plain.module, mixed.module)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        assert m16[key] == pytest.approx(m32[key], rel=1e-2), key


def test_critic_update_in_bf16_keeps_fp32_masters_and_the_fp32_gradient(random_model_dir):
    plain, m32 = critic_update(random_model_dir, FP32)
    mixed, m16 = critic_update(random_model_dir, BF16)
    assert_fp32_masters(mixed.module, mixed.optimizer)
    assert_close_gradients(plain.module, mixed.module)
    assert m16["critic/vf_loss"] == pytest.approx(m32["critic/vf_loss"], rel=1e-2)
    seqs = critic_batch(mixed.module.config.vocab_size).seqs
    values = plain.values(seqs), mixed.values(seqs)
    assert values[1].dtype == torch.float32 and (values[1] - values[0]).abs().max() < 0.01


def test_policy_log_probs_in_bf16_are_close_to_fp32(random_model_dir):
    plain, _ = policy_update(random_model_dir, FP32)
    mixed = Policy(plain.module, plain.optimizer, plain.scheduler, None, plain.settings,
                   sharding=Replicated(precision=BF16))
    seqs = batch(plain.module.config.vocab_size).seqs
    a, b = plain.log_probs(seqs), mixed.log_probs(seqs)
    assert b.dtype == torch.float32 and not torch.equal(a, b)
    assert (a - b).abs().max() < 0.01
    assert (b[seqs.response_mask == 0] == 0).all()


@pytest.mark.parametrize("weights", [torch.float32, torch.bfloat16])
def test_reference_in_bf16_is_close_to_fp32(random_model_dir, weights):
    """ref.fsdp_config.model_dtype=bf16 (bf16 weights, half the memory) or bf16 autocast over fp32 weights."""
    seqs = batch(load_causal_lm(random_model_dir).config.vocab_size).seqs
    plain = Reference(load_causal_lm(random_model_dir), 1.0, 3).log_probs(seqs)
    ref = Reference(load_causal_lm(random_model_dir, dtype=weights), 1.0, 3, precision=BF16)
    assert {p.dtype for p in ref.module.parameters()} == {weights}
    got = ref.log_probs(seqs)
    assert got.dtype == torch.float32 and not torch.equal(got, plain)
    assert (got - plain).abs().max() < 0.01
