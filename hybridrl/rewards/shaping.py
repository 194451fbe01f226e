"""Reward shaping applied on top of the scorers' values."""

from __future__ import annotations

from torch import Tensor


def overlong_penalty(lengths: Tensor, max_response_length: int, buffer_len: int, penalty_factor: float) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), times `penalty_factor`.

    With L_max = max_response_length and L_cache = buffer_len: 0 for |y| <= L_max - L_cache,
    then ((L_max - L_cache) - |y|) / L_cache, reaching -1 at |y| = L_max; -1 beyond.
    lengths: [N] response lengths in tokens -> [N] penalties (<= 0).
    """
    expected = max_response_length - buffer_len
    excess = (lengths.float() - expected).clamp(min=0)
    return -(excess / buffer_len).clamp(max=1.0) * penalty_factor
