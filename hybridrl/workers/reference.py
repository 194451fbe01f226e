"""The reference role: the initial policy, frozen, used only for KL terms."""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Optional

from torch import Tensor

from hybridrl.batch import Sequences, to_device
from hybridrl.config.levers import MicroBatching
from hybridrl.models.forward import PLAIN, Layout, batched_log_probs, device_of
from hybridrl.workers.update_loop import micro_batch_rows_of


class Reference:
    def __init__(self, module, temperature: float, batching: MicroBatching | int, layout: Layout = PLAIN,
                 view: Optional[Callable[[], ContextManager]] = None):
        """`module` is a frozen copy of the initial weights of its own, or, with `view`, a module shared
        with the policy that computes the reference only inside `view()` (LoRA: the adapter off,
        models/lora.base_policy); a shared module is left trainable."""
        self.module = module if view is not None else module.eval().requires_grad_(False)
        self.view = view or contextlib.nullcontext
        self.temperature = temperature
        self.batching = batching if isinstance(batching, MicroBatching) else MicroBatching(batching)
        self.layout = layout  # prompt sharing, packing (models/forward.py)

    def log_probs(self, seqs: Sequences) -> Tensor:
        """[N, T] log π_ref of each response token, 0 on padding."""
        seqs = to_device(seqs, device_of(self.module))
        with self.view():
            rows = lambda part: micro_batch_rows_of(part, self.batching, self.layout.share_prompts)  # noqa: E731
            return batched_log_probs(self.module, seqs, self.temperature, rows, self.layout).cpu()
