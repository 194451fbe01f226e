"""What autograd keeps for backward, measured through its saved-tensor hooks (the quantity activation
checkpointing exists to cut, and the one the memory estimate predicts): a test helper that depends on no
library's module structure."""

from __future__ import annotations

import torch


class SavedActivations:
    """Bytes of the distinct non-parameter floating-point storages autograd saves while the block runs.

    `with SavedActivations(model) as saved: loss = ...` then `saved.bytes`. Storages are told apart by address,
    so a storage saved by several ops counts once. Tensors saved inside a checkpointed region are held by the
    checkpoint, not autograd: they are not counted, which is the point."""

    def __init__(self, model: torch.nn.Module):
        self._weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._saved: dict[int, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if t.is_floating_point() and storage.data_ptr() not in self._weights:
            self._saved[storage.data_ptr()] = storage.nbytes()
        return t

    def __enter__(self) -> "SavedActivations":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    @property
    def bytes(self) -> int:
        return sum(self._saved.values())
