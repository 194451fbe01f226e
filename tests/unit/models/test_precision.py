"""The precision policy (models/precision.py) and the module-level memory levers (models/memory.py):
fp32 is the untouched plain path, bf16 really computes the matmuls in bf16, and checkpointing really
keeps fewer activations for backward (recomputing them) with the same gradients."""

from __future__ import annotations

import torch

from hybridrl.models.loading import load_causal_lm
from hybridrl.models.memory import enable_checkpointing, offload_optimizer_state
from hybridrl.models.precision import FP32, Precision
from saved_activations import SavedActivations


def test_precision_of_config_names():
    assert Precision.of() == FP32 == Precision(torch.float32, torch.float32, "cpu")
    p = Precision.of("bf16", "fp32", "cuda:1")
    assert (p.compute, p.reduce, p.device_type, p.mixed) == (torch.bfloat16, torch.float32, "cuda", True)
    assert not FP32.mixed


def test_fp32_is_no_autocast_at_all():
    layer = torch.nn.Linear(4, 3)
    with FP32.autocast():
        assert not torch.is_autocast_enabled("cpu")
        assert layer(torch.randn(2, 4)).dtype == torch.float32


def test_bf16_autocast_computes_the_model_matmuls_in_bf16(random_model_dir):
    model = load_causal_lm(random_model_dir)
    seen = {}
    for name, sub in [("q", model.model.layers[0].self_attn.q_proj), ("down", model.model.layers[0].mlp.down_proj)]:
        sub.register_forward_hook(lambda m, i, out, name=name: seen.update({name: out.dtype}))
    ids = torch.randint(3, model.config.vocab_size, (2, 5))
    with Precision.of("bf16").autocast():
        logits = model(input_ids=ids).logits
    assert seen == {"q": torch.bfloat16, "down": torch.bfloat16}
    assert logits.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights themselves stay fp32


def _forward_backward(model, ids) -> tuple[int, list[torch.Tensor]]:
    """Bytes autograd saves for backward in one forward, and the gradients after the backward."""
    with SavedActivations(model) as saved:
        loss = torch.log_softmax(model(input_ids=ids, use_cache=False).logits, -1)[..., 7].sum()
    loss.backward()
    return saved.bytes, [p.grad for p in model.parameters()]


def test_checkpointing_keeps_fewer_activations_for_backward_with_the_same_gradients(random_model_dir):
    ids = torch.randint(3, 50, (3, 6))
    plain, model = load_causal_lm(random_model_dir), load_causal_lm(random_model_dir)
    enable_checkpointing(model)
    plain_bytes, plain_grads = _forward_backward(plain.train(), ids)
    ckpt_bytes, grads = _forward_backward(model.train(), ids)
    # a layer's inner activations (norms, q/k/v, attention, MLP) are recomputed in backward, not kept: only
    # each layer's input and the head's tensors remain (measured: 8x fewer bytes here)
    assert ckpt_bytes < plain_bytes / 2, (ckpt_bytes, plain_bytes)
    for a, b in zip(plain_grads, grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # eval mode (generation, log-prob passes) never checkpoints: it keeps what the plain model keeps
    assert _forward_backward(model.eval(), ids)[0] == _forward_backward(plain.eval(), ids)[0]


def test_offloaded_optimizer_moves_its_state_around_each_step_and_steps_like_the_plain_one(monkeypatch):
    """Every step: the moments to the parameters' device before it, to the host after. On a CPU both are
    the host, so the update must be the plain one; the GPU round trip itself is tests/unit/cuda's."""
    from hybridrl.models import memory

    moves, move = [], memory._move_state
    monkeypatch.setattr(memory, "_move_state", lambda opt, where: moves.append(where(opt.param_groups[0]["params"][0]))
                        or move(opt, where))
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    opt_a, opt_b = torch.optim.AdamW(a.parameters(), 1e-2), torch.optim.AdamW(b.parameters(), 1e-2)
    offload_optimizer_state(opt_b)
    for _ in range(3):
        x = torch.randn(5, 4)
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert all(v.device.type == "cpu" for s in opt_b.state.values() for v in s.values())
    assert moves == [a.weight.device, memory.HOST] * 3  # (the parameters' device, then the host) per step
