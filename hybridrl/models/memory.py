"""Memory levers of a role's module, set once when the role is built (workers/build.py):

- activation checkpointing (model.enable_gradient_checkpointing): each decoder layer keeps only its
  input in the update's forward and is recomputed in backward (Chen et al. 2016, "Training Deep Nets
  with Sublinear Memory Cost"); the same gradients, one more forward of the layers;
- host-memory offload on a GPU (fsdp_config.optimizer_offload, ref.fsdp_config.param_offload): state
  a phase does not use waits in host memory and comes to the GPU only for the phase that does.
  FSDP2's parameter offload is its own CPUOffloadPolicy (parallel/sharding.py); these are the two
  the strategies do not cover. On a CPU device neither is installed (plan/levers.offload_note).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

HOST = torch.device("cpu")


def enable_checkpointing(module: torch.nn.Module) -> None:
    """Checkpoint every decoder layer of a HF model (a peft wrapper passes the call to its base model),
    non-reentrant: frozen inputs (LoRA's embeddings) need no requires_grad trick, and it composes with
    autocast and FSDP2's per-layer hooks. Active in train() mode only, so generation (eval mode) keeps
    its KV cache; in train mode HF's layers drop past_key_values, which is why the padded prompt sharing
    is refused with it (plan/levers.py)."""
    kwargs = {"use_reentrant": False}
    if hasattr(module, "activation_checkpointing_enable"):  # transformers >= 5.24; the old name warns there
        module.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        module.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def is_checkpointing(module: torch.nn.Module) -> bool:
    """Whether enable_checkpointing is in effect on this HF model (or its peft wrapper's base)."""
    if hasattr(module, "is_activation_checkpointing"):  # transformers >= 5.24; the old property warns there
        return bool(module.is_activation_checkpointing)
    return bool(module.is_gradient_checkpointing)


def disable_checkpointing(module: torch.nn.Module) -> None:
    """Undo enable_checkpointing: every decoder layer keeps its activations again."""
    if hasattr(module, "activation_checkpointing_disable"):
        module.activation_checkpointing_disable()
    else:
        module.gradient_checkpointing_disable()


def _move_state(optimizer: torch.optim.Optimizer, device_of_param) -> None:
    """Every state tensor (AdamW's exp_avg, exp_avg_sq) to device_of_param(p); the step counter stays
    where AdamW keeps it (a host scalar, or with fused or capturable AdamW one on the parameter's device)."""
    for p, state in optimizer.state.items():
        target = device_of_param(p)
        for key, value in state.items():
            if key != "step" and torch.is_tensor(value) and value.device != target:
                state[key] = value.to(target)


def offload_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Keep the optimizer's moments in host memory between steps: moved to each parameter's device just
    before optimizer.step() and back to the host right after (hooks on the optimizer, so every caller of
    step() gets it; the moments are 2x the trained weights in fp32, the largest state of a full update)."""
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: _move_state(opt, lambda p: p.device))
    optimizer.register_step_post_hook(lambda opt, args, kwargs: _move_state(opt, lambda p: HOST))


@contextlib.contextmanager
def on_device(module: torch.nn.Module, device: str | torch.device) -> Iterator[torch.nn.Module]:
    """`module` moved to `device` for the block, and back to the host after (a frozen reference that
    waits in host memory between its log-prob passes)."""
    module.to(device)
    try:
        yield module
    finally:
        module.to(HOST)
