"""Model FLOPs of a training pass and the device's measured matmul peak, for `perf/mfu/actor`.

Training FLOPs of one sequence of S tokens (PaLM, Chowdhery et al. 2022, appendix B):
6·N·S + 12·L·d·S², with N the parameters of every matmul (attention and MLP projections and the
LM head, tied or not; embedding lookups are free), L layers and d = heads × head_dim. The first
term is forward (2NS) plus backward (4NS); the second is QKᵀ and attention·V, forward and
backward, counted over the full S×S square as PaLM and verl do.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn


def matmul_params(module: nn.Module) -> int:
    """Weights that a token multiplies: every nn.Linear (the LM head included, even when tied)."""
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def attention_width(config) -> int:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_attention_heads * head_dim


@dataclass(frozen=True)
class ModelShape:
    """What FLOP counting and the peak lookup need from a model (picklable, unlike the model)."""

    n_matmul: int
    n_layers: int
    width: int
    device: str
    dtype: torch.dtype

    @staticmethod
    def of(module: nn.Module) -> "ModelShape":
        p = next(module.parameters())
        return ModelShape(matmul_params(module), module.config.num_hidden_layers, attention_width(module.config),
                          str(p.device), p.dtype)


def training_flops(seq_lens: Tensor, n_matmul: int, n_layers: int, width: int) -> float:
    """FLOPs of one forward + backward over sequences of `seq_lens` ([B] real tokens each)."""
    s = seq_lens.double()
    return float(6 * n_matmul * s.sum() + 12 * n_layers * width * (s * s).sum())


def shared_prompt_training_flops(prompt_lens: Tensor, response_lens: Tensor, group: Tensor, n_matmul: int,
                                 n_layers: int, width: int) -> float:
    """training_flops when each group's prompt runs once (models/forward.prefill_distinct):
    prompt_lens, response_lens, group [B] (rows of one group share one prompt, so one length).
    Matmuls see each distinct prompt once and every response; attention is a prompt's P² once
    plus each response's (P+R)² - P² (its queries against its prompt and itself). Equal to
    training_flops when no two rows share a group."""
    p, r = prompt_lens.double(), response_lens.double()
    inverse = torch.unique(group, return_inverse=True)[1]
    once = torch.zeros(int(inverse.max()) + 1 if len(group) else 0, dtype=torch.float64).scatter(0, inverse, p)
    return float(6 * n_matmul * (once.sum() + r.sum())
                 + 12 * n_layers * width * ((once * once).sum() + ((p + r) ** 2 - p * p).sum()))


@functools.lru_cache(maxsize=None)
def measured_peak_flops(device: str = "cpu", dtype: torch.dtype = torch.float32, size: int = 0,
                        repeats: int = 3) -> float:
    """FLOP/s of the fastest of `repeats` square matmuls on this device: the achievable peak
    (a vendor's datasheet figure means nothing on a shared CPU). Measured once per process.
    `size` 0 picks 2048 on CPU (about 0.5 s here; 1024 read 16 % lower, still short of the
    plateau) and 8192 on GPU, where smaller products cannot fill the device."""
    size = size or (8192 if device.startswith("cuda") else 2048)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b  # warm-up: thread pools, kernels
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best
