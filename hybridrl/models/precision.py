"""Mixed precision as a policy: each role's compute and gradient-reduction dtypes, chosen once from
its config section (plan/levers.py resolves the effective names) and consulted around its forwards.

bf16 compute over fp32 master weights (Micikevicius et al. 2018, "Mixed Precision Training", with
bf16's fp32 exponent range, so no loss scaling): the module keeps fp32 parameters and AdamW state;
`autocast()` runs the matmuls of a forward in bf16 (torch.autocast: linear/matmul/bmm inputs cast
to bf16, outputs bf16; norms, softmax and the residual stream stay fp32 on the ddp path), and the
backward replays those casts, so gradients land fp32 on the fp32 parameters. With fp32 compute
every method here is the identity, and the plain path runs unchanged.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # plan/levers.dtype_name's names


@dataclass(frozen=True)
class Precision:
    """One role's precision: `compute` of its forwards (and so its backwards), `reduce` of the gradient
    sum across data-parallel ranks, on a `device_type` ("cpu" | "cuda") device."""

    compute: torch.dtype = torch.float32
    reduce: torch.dtype = torch.float32
    device_type: str = "cpu"

    @classmethod
    def of(cls, compute: str = "fp32", reduce: str = "fp32", device: str = "cpu") -> "Precision":
        """From levers' dtype names ('fp32' | 'bf16') and trainer.device ('cpu' | 'cuda' | 'cuda:1')."""
        return cls(DTYPES[compute], DTYPES[reduce], torch.device(device).type)

    @property
    def mixed(self) -> bool:
        """Whether forwards compute in a dtype below the fp32 weights."""
        return self.compute != torch.float32

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context a forward runs in: bf16 autocast, or nothing for fp32 (not an fp32 autocast, which
        would still route every op through the autocast dispatcher)."""
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute)


FP32 = Precision()
