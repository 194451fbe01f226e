"""The reference role: the initial policy, frozen, used only for KL terms. The distillation teacher is the same
role over another frozen model (workers/build.py build_teacher)."""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Optional

from torch import Tensor

from hybridrl.batch import Sequences, to_device
from hybridrl.plan.levers import MicroBatching
from hybridrl.models.forward import PLAIN, Layout, batched_log_probs, device_of
from hybridrl.models.precision import FP32, Precision
from hybridrl.workers.update_loop import micro_batch_rows_of


class Reference:
    def __init__(self, module, temperature: float, batching: MicroBatching | int, layout: Layout = PLAIN,
                 view: Optional[Callable[[], ContextManager]] = None, precision: Precision = FP32):
        """`module` is a frozen copy of the initial weights of its own, or, with `view`, a module shared
        with the policy that computes the reference only inside `view()` (LoRA: the adapter off,
        models/lora.base_policy); a shared module is left trainable. A view may also place the module:
        an offloaded reference waits on the host and is moved to the GPU inside it (models/memory.on_device).
        `precision`: the compute dtype of its forwards (ref.fsdp_config.mixed_precision.param_dtype)."""
        self.module = module if view is not None else module.eval().requires_grad_(False)
        self.view = view or contextlib.nullcontext
        self.precision = precision
        self.temperature = temperature
        self.batching = batching if isinstance(batching, MicroBatching) else MicroBatching(batching)
        self.layout = layout  # prompt sharing, packing (models/forward.py)

    def log_probs(self, seqs: Sequences) -> Tensor:
        """[N, T] log π_ref of each response token, 0 on padding."""
        with self.view(), self.precision.autocast():
            seqs = to_device(seqs, device_of(self.module))
            rows = lambda part: micro_batch_rows_of(part, self.batching, self.layout.share_prompts)  # noqa: E731
            return batched_log_probs(self.module, seqs, self.temperature, rows, self.layout).cpu()
