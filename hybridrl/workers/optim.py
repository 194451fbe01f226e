"""AdamW with linear warm-up, then a constant or cosine learning rate (verl's `optim.*`)."""

from __future__ import annotations

import math

import torch

from hybridrl.config.schema import WARMUP_STYLES  # the valid values, declared with the key
from hybridrl.errors import ConfigError


def warmup_steps_of(lr_warmup_steps: int, lr_warmup_steps_ratio: float, total_steps: int) -> int:
    """`lr_warmup_steps` if >= 0, else the ratio of the total (verl's rule)."""
    return lr_warmup_steps if lr_warmup_steps >= 0 else int(lr_warmup_steps_ratio * total_steps)


def lr_multiplier(step: int, warmup: int, total: int, style: str, min_lr_ratio: float = 0.0) -> float:
    """Factor on the peak lr at optimizer step `step` (0-based)."""
    if style not in WARMUP_STYLES:
        raise ConfigError(f"optim.warmup_style={style!r} is not supported; valid values: {', '.join(WARMUP_STYLES)}")
    if step < warmup:
        return (step + 1) / warmup
    if style == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(params, lr: float, weight_decay: float, betas: list[float], warmup: int, total: int,
                    style: str, min_lr_ratio: float) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW and a per-optimizer-step LambdaLR following `lr_multiplier`.

    Plain fp32 tensors get torch's fused AdamW: one kernel per parameter instead of about ten
    elementwise ops (measured on CPU: 25.5M parameters 106-234 ms -> 18-20 ms per step; torch
    picks the per-parameter loop on CPU by default). Sharded (FSDP2, DTensor) parameters keep
    the default implementation."""
    params = list(params)
    fused = all(type(p.data) is torch.Tensor and p.dtype == torch.float32 for p in params) or None
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=tuple(betas), fused=fused)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_multiplier(s, warmup, total, style, min_lr_ratio))
    return opt, sched
