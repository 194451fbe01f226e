"""The reference role: the initial policy, frozen, used only for KL terms."""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Optional

from torch import Tensor

from hybridrl.batch import Sequences, to_device
from hybridrl.models.forward import batched_log_probs, device_of


class Reference:
    def __init__(self, module, temperature: float, micro_batch_size: int, share_prompts: bool = False,
                 view: Optional[Callable[[], ContextManager]] = None):
        """`module` is a frozen copy of the initial weights of its own, or, with `view`, a module shared
        with the policy that computes the reference only inside `view()` (LoRA: the adapter off,
        models/lora.base_policy); a shared module is left trainable."""
        self.module = module if view is not None else module.eval().requires_grad_(False)
        self.view = view or contextlib.nullcontext
        self.temperature, self.micro_batch_size = temperature, micro_batch_size
        self.share_prompts = share_prompts  # one forward per distinct prompt (models/forward.prefill_distinct)

    def log_probs(self, seqs: Sequences) -> Tensor:
        """[N, T] log π_ref of each response token, 0 on padding."""
        seqs = to_device(seqs, device_of(self.module))
        with self.view():
            return batched_log_probs(self.module, seqs, self.temperature, self.micro_batch_size,
                                     self.share_prompts).cpu()
