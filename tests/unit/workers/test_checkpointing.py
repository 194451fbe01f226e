"""Activation checkpointing (model.enable_gradient_checkpointing) against the plain update: autograd really
keeps far fewer activation bytes for backward (the layers' insides are recomputed there) and the gradients
are the plain ones to 1e-6, for the policy and the critic, full and LoRA, fp32 and bf16 (the recompute
replays the forward's autocast). And why the padded prompt sharing is refused with it (levers.py)."""

from __future__ import annotations

import pytest
import torch

from hybridrl.parallel.sharding import Replicated
from hybridrl.models.forward import PLAIN, Layout
from hybridrl.models.loading import load_causal_lm, load_value_model
from hybridrl.models.lora import LoraSettings, apply_lora
from hybridrl.models.memory import enable_checkpointing
from hybridrl.models.precision import FP32, Precision
from hybridrl.workers.optim import build_optimizer
from hybridrl.workers.critic import Critic, CriticSettings
from hybridrl.workers.policy import Policy
from saved_activations import SavedActivations
from test_critic import critic_batch
from test_policy import batch, settings


def update(model_dir: str, role: str, checkpointing: bool, lora: bool = False, precision: Precision = FP32,
           layout: Layout = PLAIN) -> tuple[list[torch.Tensor], int]:
    """(trainable parameters' gradients, activation bytes autograd saved for backward) of one update with lr 0."""
    torch.manual_seed(0)
    if role == "actor":
        module = load_causal_lm(model_dir)
        task = "CAUSAL_LM"
    else:
        module = load_value_model(model_dir, "critic.model.path")
        task = "TOKEN_CLS"
    if lora:
        module = apply_lora(module, LoraSettings(4, 8.0, "all-linear", task_type=task))
    if checkpointing:
        enable_checkpointing(module)
    params = [p for p in module.parameters() if p.requires_grad]
    opt, sched = build_optimizer(params, 0.0, 0.0, [0.9, 0.999], 0, 1, "constant", 0.0)  # lr 0: keep the grads
    sharding = Replicated(precision=precision)
    with SavedActivations(module) as saved:
        if role == "actor":
            worker = Policy(module, opt, sched, None, settings(micro=3, layout=layout), sharding=sharding)
            worker.update(batch(module.config.vocab_size))
        else:
            s = CriticSettings(mini_batch_size=8, micro_batch_size=3, forward_micro_batch_size=8, ppo_epochs=1,
                               shuffle=False, cliprange_value=0.2, loss_agg_mode="token-mean", grad_clip=1e9)
            worker = Critic(module, opt, sched, s, sharding=sharding)
            worker.update(critic_batch(module.config.vocab_size))
    return [p.grad.clone() for p in params], saved.bytes


PACKED_SHARED = Layout(share_prompts=True, packed=True)  # use_remove_padding=true: sharing without a KV cache


@pytest.mark.parametrize("role, lora, precision, layout", [
    ("actor", False, "fp32", PLAIN), ("critic", False, "fp32", PLAIN), ("actor", True, "fp32", PLAIN),
    ("critic", True, "fp32", PLAIN), ("actor", False, "bf16", PLAIN), ("critic", False, "bf16", PLAIN),
    ("actor", False, "fp32", PACKED_SHARED), ("actor", True, "bf16", PACKED_SHARED)])
def test_checkpointed_gradients_equal_the_plain_ones(random_model_dir, role, lora, precision, layout):
    p = Precision.of(precision)
    plain, plain_bytes = update(random_model_dir, role, False, lora, p, layout)
    ckpt, ckpt_bytes = update(random_model_dir, role, True, lora, p, layout)
    assert 0 < ckpt_bytes < plain_bytes / 2, (ckpt_bytes, plain_bytes)  # the layers' insides were not kept
    assert sum(float(g.abs().sum()) for g in plain) > 0
    for a, b in zip(plain, ckpt):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)


def test_checkpointing_drops_the_shared_prompt_cache_hence_refused(random_model_dir):
    """HF's checkpointed layers set past_key_values=None in train mode, so the responses of the padded
    prompt-sharing forward would attend to no prompt: a different gradient (levers._check_checkpointing)."""
    shared, _ = update(random_model_dir, "actor", False, layout=Layout(share_prompts=True))
    broken, _ = update(random_model_dir, "actor", True, layout=Layout(share_prompts=True))
    shared, broken = torch.cat([g.flatten() for g in shared]), torch.cat([g.flatten() for g in broken])
    assert (shared - broken).norm() > 0.1 * shared.norm()  # measured: 68 % of its norm
