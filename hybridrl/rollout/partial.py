"""Partial rollouts (async_training.partial_rollout): a weight push reaches a generation that is already running,
which takes it at its next decode-step boundary and continues with the new weights.

The push and the generation run on two threads of a rollout worker (distributed/rollout_worker.py); this inbox
is the one place they share. The push offers its weights; the decode loop (rollout/hf.py) takes them between
two tokens; if the generation ends first, the push loads them itself at its own turn. Either way the weights
are loaded exactly once and `version` is always the version the engine holds.

Every token keeps the version of the weights that sampled it and its log-prob under those weights, so a
response may mix versions (AReaL, Fu et al. 2025, arXiv 2505.24298, "interruptible rollouts").
"""

from __future__ import annotations

import threading
from typing import Iterable, Optional

from torch import Tensor

Weights = Iterable[tuple[str, Tensor]]


class WeightInbox:
    def __init__(self, version: int = -1):
        self.version = version  # the optimizer step of the weights the engine holds (-1: the model folder's)
        self._lock = threading.Lock()
        self._offered: Optional[tuple[Weights, int]] = None

    def offer(self, weights: Weights, version: int) -> None:
        """A push's weights for the running generation to take (at most one waits: pushes run in ticket order)."""
        with self._lock:
            assert self._offered is None, "a second weight push before the first was taken"
            self._offered = (weights, version)

    def take(self) -> Optional[tuple[Weights, int]]:
        """The offered weights, once: whoever takes them loads them and sets `version`."""
        with self._lock:
            got, self._offered = self._offered, None
            return got
