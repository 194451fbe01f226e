"""The reference role: a frozen copy of the initial policy, used only for KL terms."""

from __future__ import annotations

from torch import Tensor

from hybridrl.batch import Sequences, to_device
from hybridrl.models.forward import batched_log_probs, device_of


class Reference:
    def __init__(self, module, temperature: float, micro_batch_size: int, share_prompts: bool = False):
        self.module = module.eval().requires_grad_(False)
        self.temperature, self.micro_batch_size = temperature, micro_batch_size
        self.share_prompts = share_prompts  # one forward per distinct prompt (models/forward.prefill_distinct)

    def log_probs(self, seqs: Sequences) -> Tensor:
        """[N, T] log π_ref of each response token, 0 on padding."""
        seqs = to_device(seqs, device_of(self.module))
        return batched_log_probs(self.module, seqs, self.temperature, self.micro_batch_size, self.share_prompts).cpu()
